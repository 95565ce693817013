"""Cutting a byte stream into frames, with the frame-size limit enforced before buffering."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">I")


class FrameTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit}")
        self.size = size
        self.limit = limit


class FrameSplitter:
    """Feed bytes in; get whole frames (without their size prefix) out.

    ``max_size`` counts the 4 size bytes too, as frame_max does; 0 means no limit.
    """

    __slots__ = ("_buf", "max_size")

    def __init__(self, max_size: int = 0) -> None:
        self._buf = bytearray()
        self.max_size = max_size

    def feed(self, data: bytes | memoryview) -> list[memoryview]:
        """Return the frames completed by ``data``. Raises FrameTooLarge on an oversize frame."""
        buf = self._buf
        if buf:
            buf += data
            # a big frame arrives in many reads: copy only once it is whole
            if len(buf) < 4 or len(buf) - 4 < _SIZE.unpack_from(buf, 0)[0]:
                size = _SIZE.unpack_from(buf, 0)[0] + 4 if len(buf) >= 4 else 0
                if self.max_size and size > self.max_size:
                    raise FrameTooLarge(size, self.max_size)
                return []
            view = memoryview(bytes(buf))
            buf.clear()
        else:
            view = memoryview(data)
        frames: list[memoryview] = []
        pos, end, limit = 0, len(view), self.max_size
        while end - pos >= 4:
            size = _SIZE.unpack_from(view, pos)[0]
            if limit and size + 4 > limit:
                raise FrameTooLarge(size + 4, limit)
            if end - pos - 4 < size:
                break
            frames.append(view[pos + 4 : pos + 4 + size])
            pos += 4 + size
        if pos < end:
            buf += view[pos:]
        return frames
