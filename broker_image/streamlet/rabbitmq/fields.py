"""Primitive wire types: a bounds-checked reader and the field codecs commands are built from.

Everything is big-endian. ``string`` is an i16 length (-1 = null) and UTF-8 bytes, ``bytes``
an i32 length (-1 = null), arrays an i32 count. A read past the end raises :class:`Malformed`,
which :func:`streamlet.rabbitmq.frames.decode` turns into an error value.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")


class Malformed(Exception):
    """The bytes do not hold what the layout says (truncated, bad length, bad UTF-8)."""


class Reader:
    """A cursor over one frame body."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _unpack(self, s: struct.Struct) -> Any:
        pos = self.pos
        if pos + s.size > self.end:
            raise Malformed(f"truncated at byte {pos}")
        self.pos = pos + s.size
        return s.unpack_from(self.buf, pos)[0]

    def u8(self) -> int:
        return self._unpack(_U8)  # type: ignore[no-any-return]

    def u16(self) -> int:
        return self._unpack(_U16)  # type: ignore[no-any-return]

    def u32(self) -> int:
        return self._unpack(_U32)  # type: ignore[no-any-return]

    def i32(self) -> int:
        return self._unpack(_I32)  # type: ignore[no-any-return]

    def u64(self) -> int:
        return self._unpack(_U64)  # type: ignore[no-any-return]

    def i64(self) -> int:
        return self._unpack(_I64)  # type: ignore[no-any-return]

    def raw(self, n: int) -> bytes:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise Malformed(f"truncated at byte {pos}")
        self.pos = pos + n
        return bytes(self.buf[pos : pos + n])

    def string(self) -> str | None:
        n = self._unpack(_I16)
        if n == -1:
            return None
        if n < 0:
            raise Malformed(f"bad string length {n}")
        try:
            return self.raw(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise Malformed("string is not UTF-8") from e

    def str_(self) -> str:
        """A string where null is read as empty (names, keys)."""
        return self.string() or ""

    def bytes_(self) -> bytes | None:
        n = self._unpack(_I32)
        if n == -1:
            return None
        if n < 0:
            raise Malformed(f"bad bytes length {n}")
        return self.raw(n)

    def rest(self) -> bytes:
        return self.raw(self.end - self.pos)

    def rest_view(self) -> memoryview:
        """What is left, as a view of the frame: no copy (a chunk's bytes)."""
        view = memoryview(self.buf)[self.pos : self.end]
        self.pos = self.end
        return view

    def array(self, item: Callable[[Reader], Any]) -> list[Any]:
        n = self._unpack(_I32)
        if n < 0 or n > self.end - self.pos:  # every item takes at least one byte
            raise Malformed(f"bad array length {n}")
        return [item(self) for _ in range(n)]

    def properties(self) -> dict[str, str]:
        n = self._unpack(_I32)
        if n < 0 or n > self.end - self.pos:
            raise Malformed(f"bad array length {n}")
        out: dict[str, str] = {}
        for _ in range(n):
            k = self.str_()
            out[k] = self.str_()
        return out


# --- encoders: each returns bytes; frames join them once -------------------------------


def u8(v: int) -> bytes:
    return _U8.pack(v)


def u16(v: int) -> bytes:
    return _U16.pack(v)


def u32(v: int) -> bytes:
    return _U32.pack(v)


def i32(v: int) -> bytes:
    return _I32.pack(v)


def u64(v: int) -> bytes:
    return _U64.pack(v)


def i64(v: int) -> bytes:
    return _I64.pack(v)


def string(v: str | None) -> bytes:
    if v is None:
        return b"\xff\xff"
    b = v.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return _I16.pack(len(b)) + b


def bytes_(v: bytes | None) -> bytes:
    if v is None:
        return b"\xff\xff\xff\xff"
    return _I32.pack(len(v)) + bytes(v)


def array(items: list[Any], item: Callable[[Any], bytes]) -> bytes:
    return _I32.pack(len(items)) + b"".join(item(x) for x in items)


def properties(props: dict[str, str]) -> bytes:
    return _I32.pack(len(props)) + b"".join(string(k) + string(v) for k, v in props.items())
