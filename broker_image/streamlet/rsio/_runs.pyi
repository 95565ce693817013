"""_runs.c's types: its Python twin is runs.py's ``_run_python`` (docs/development.md, "The C
extensions")."""

def on_next_run(
    sub: int, data: bytes | bytearray | memoryview, max_count: int, max_bytes: int, split: int,
    element_size: int, /,
) -> tuple[bytes, int, int]: ...
