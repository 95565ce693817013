"""_runs.c's types: its Python twins are runs.py's ``_run_python`` and ``_cut_python``
(docs/development.md, "The C extensions")."""

def on_next_run(
    sub: int, data: bytes | bytearray | memoryview, max_count: int, max_bytes: int, split: int,
    element_size: int, /,
) -> tuple[bytes, int, int]: ...
def cut_on_next(
    data: bytes | bytearray | memoryview, sub: int, max_count: int, max_element: int, /,
) -> tuple[bytes, int, int]: ...
