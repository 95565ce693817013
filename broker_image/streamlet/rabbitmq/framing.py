"""The RabbitMQ Stream protocol's frames cut from a byte stream: a 4-byte size prefix."""

from __future__ import annotations

import struct

from ..wire.framing import FrameTooLarge, Splitter

_SIZE = struct.Struct(">I")


class FrameSplitter(Splitter):
    """The RabbitMQ Stream protocol's frames: a 4-byte size prefix, then the frame (handed out
    without its prefix). ``max_size`` counts the 4 size bytes too, as frame_max does; 0 means
    no limit."""

    __slots__ = ()
    skip = 4

    def __init__(self, max_size: int = 0) -> None:
        super().__init__(max_size, 4)

    def measure(self, buf: bytes | memoryview, pos: int = 0) -> int | None:
        if len(buf) - pos < 4:
            return None
        need: int = 4 + _SIZE.unpack_from(buf, pos)[0]
        if self.max_size and need > self.max_size:
            raise FrameTooLarge(need, self.max_size)
        return need
