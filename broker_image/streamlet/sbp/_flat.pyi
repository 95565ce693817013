"""_flat.c's types: its Python twins are flat.py's ``_fill_append`` and ``_fill_fetch``, and the
Python paths of ``Scalars.read``/``summary``, ``append_runs`` and ``append_run``
(docs/development.md, "The C extensions")."""

from array import array
from typing import Literal, overload

def fill_append(buf: bytearray, at: int, status: int,
                runs: list[tuple[list[int], int, int, int]], /) -> None: ...
def fill_fetch(buf: bytearray, at: int, status: int,
               streams: list[tuple[int, int, list[tuple[int, int]], bytes | array[int]]],
               /) -> None: ...
@overload
def read_columns(buf: bytes | memoryview, vector_slot: int,
                 fields: tuple[tuple[int, int, int], ...], summary: Literal[False] = ...,
                 /) -> tuple[list[int], ...]: ...
@overload
def read_columns(buf: bytes | memoryview, vector_slot: int,
                 fields: tuple[tuple[int, int, int], ...], summary: Literal[True],
                 /) -> tuple[int, tuple[tuple[int, int, int, bool], ...]]: ...
def read_runs(buf: bytes | memoryview, vector_slot: int,
              /) -> list[tuple[int, int, list[int], int]] | None: ...
def append_run(frame: bytes | memoryview, /) -> tuple[int, int, int, int, int, int] | None: ...
