"""_arena.c's types: its Python twin is ``bytearray`` (wire/framing.py); mypy checks one against
the other (docs/development.md, "The C extensions")."""

def arena(n: int, /) -> bytearray: ...
