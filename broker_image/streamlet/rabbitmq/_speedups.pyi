"""_speedups.c's types: the Python twin is publish.py's ``_split_python`` (v1); its tuple is
PublishBatch's fields in order (docs/development.md, "The C extensions")."""

def split_publish_v1(
    body: bytes | memoryview, /,
) -> tuple[int, int, bytes, bytes, int, int, int, bool, None, bool]: ...
