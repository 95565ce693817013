"""Cutting a byte stream into frames, with the frame-size limit enforced before buffering."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">I")
_EMPTY = memoryview(b"")


class FrameTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit}")
        self.size = size
        self.limit = limit


class FrameSplitter:
    """Feed the bytes of one read in, then iterate to pull its whole frames (without their size
    prefix) out, one at a time.

    Each frame is checked against ``max_size`` when it is pulled, not when its bytes arrived: a
    handler may change the limit (Open raises it) and the frames after it in the same read are
    held to the new one; the frames before an oversize frame are all handed out before
    FrameTooLarge is raised. ``max_size`` counts the 4 size bytes too, as frame_max does; 0 means
    no limit. A frame split over reads is kept as the pieces that arrived (copied out of the read
    only when small) and joined once, when whole.
    """

    __slots__ = ("_have", "_need", "_pieces", "_pos", "_rest", "begun", "max_size")

    def __init__(self, max_size: int = 0) -> None:
        self._rest = _EMPTY  # what is left of the last read
        self._pos = 0
        self._pieces: list[bytes | memoryview] = []  # the start of an incomplete frame
        self._have = 0  # bytes in _pieces
        self._need = 0  # that frame's length with its prefix, once the prefix is whole
        self.max_size = max_size
        #: how many frames have been left incomplete at the end of a read: a caller tells a new
        #: incomplete frame from the one it already knew by this changing
        self.begun = 0

    @property
    def pending(self) -> int:
        """The length (with its prefix) of the incomplete frame held, 0 if none or unknown yet."""
        return self._need

    @property
    def held(self) -> int:
        """Bytes of an incomplete frame held between reads."""
        return self._have

    def feed(self, data: bytes | memoryview) -> FrameSplitter:
        """Take the bytes of one read (the frames of the previous one must have been pulled);
        returns the splitter, to iterate."""
        view = memoryview(data)
        if self._have:
            if not self._need:  # the size prefix itself was split
                take = 4 - self._have
                self._pieces.append(bytes(view[:take]))
                self._have += min(take, len(view))
                view = view[take:]
                if self._have < 4:
                    self._rest, self._pos = _EMPTY, 0
                    return self
                prefix = b"".join(self._pieces)
                self._pieces = [prefix]
                self._need = 4 + _SIZE.unpack(prefix)[0]
                self._check(self._need)
            take = min(self._need - self._have, len(view))
            self._pieces.append(view[:take])
            self._have += take
            view = view[take:]
        self._rest, self._pos = view, 0
        return self

    def __iter__(self) -> FrameSplitter:
        return self

    def __next__(self) -> memoryview:
        if self._need and self._have == self._need:  # a frame split over reads, now whole
            frame = memoryview(b"".join(self._pieces))[4:]
            self._pieces, self._have, self._need = [], 0, 0
            return frame
        if self._have:  # still incomplete: this read was all of it
            raise StopIteration
        view, pos = self._rest, self._pos
        left = len(view) - pos
        if left >= 4:
            size = _SIZE.unpack_from(view, pos)[0]
            self._check(size + 4)
            if left - 4 >= size:
                self._pos = pos + 4 + size
                return view[pos + 4 : pos + 4 + size]
            self._need = size + 4
        if left:
            # Copied: a view would keep the whole read alive for a few bytes of it.
            tail = bytes(view[pos:])
            self._pieces, self._have = [tail], len(tail)
            self.begun += 1
        self._rest, self._pos = _EMPTY, 0
        raise StopIteration

    def _check(self, size: int) -> None:
        if self.max_size and size > self.max_size:
            raise FrameTooLarge(size, self.max_size)
