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


class Splitter:
    """Feed the bytes of one read in, then iterate to pull its whole frames out, one at a time.

    A protocol's splitter says, in ``measure``, how long the frame starting at a position is
    from its first bytes (None while those bytes do not say it yet; ``head_max`` bytes always
    do), raising FrameTooLarge (or a subclass) for one it must not take; ``skip`` bytes at the
    start of each frame (a size prefix) are not handed out. Each frame is measured when it is
    pulled, not when its bytes arrived: a handler may change a limit (Open raises it) and the
    frames after it in the same read are held to the new one; the frames before an oversize
    frame are all handed out before the error. A frame split over reads is kept as the pieces
    that arrived (copied out of the read only when small) and joined once, when whole.
    """

    __slots__ = ("_have", "_head_max", "_need", "_pieces", "_pos", "_rest", "begun", "max_size")
    skip = 0

    def __init__(self, max_size: int, head_max: int) -> None:
        self._rest = _EMPTY  # what is left of the last read
        self._pos = 0
        self._pieces: list[bytes | memoryview] = []  # the start of an incomplete frame
        self._have = 0  # bytes in _pieces
        self._need = 0  # that frame's whole length, once its first bytes say it
        self._head_max = head_max
        self.max_size = max_size
        #: how many frames have been left incomplete at the end of a read: a caller tells a new
        #: incomplete frame from the one it already knew by this changing
        self.begun = 0

    def measure(self, buf: bytes | memoryview, pos: int = 0) -> int | None:
        raise NotImplementedError

    @property
    def pending(self) -> int:
        """The whole length of the incomplete frame held, 0 if none or unknown yet."""
        return self._need

    @property
    def held(self) -> int:
        """Bytes of an incomplete frame held between reads."""
        return self._have

    def clear(self) -> None:
        """Drop an incomplete frame (its connection is gone): its memory goes now."""
        self._rest, self._pos, self._pieces, self._have, self._need = _EMPTY, 0, [], 0, 0

    def feed(self, data: bytes | memoryview) -> Splitter:
        """Take the bytes of one read (the frames of the previous one must have been pulled);
        returns the splitter, to iterate."""
        view = memoryview(data)
        if self._have:
            if not self._need:  # the start of the frame itself was split: it was copied
                joined = bytes(self._pieces[0]) + bytes(view[: self._head_max])
                need = self.measure(joined)
                if need is None:  # still short of saying it: all of this read was taken
                    self._pieces, self._have = [joined], len(joined)
                    self._rest, self._pos = _EMPTY, 0
                    return self
                self._need = need
            take = min(self._need - self._have, len(view))
            self._pieces.append(view[:take])
            self._have += take
            view = view[take:]
        self._rest, self._pos = view, 0
        return self

    def __iter__(self) -> Splitter:
        return self

    def __next__(self) -> memoryview:
        if self._need and self._have == self._need:  # a frame split over reads, now whole
            frame = memoryview(b"".join(self._pieces))[self.skip:]
            self._pieces, self._have, self._need = [], 0, 0
            return frame
        if self._have:  # still incomplete: this read was all of it
            raise StopIteration
        view, pos = self._rest, self._pos
        left = len(view) - pos
        if left:
            need = self.measure(view, pos)
            if need is not None and left >= need:
                self._pos = pos + need
                return view[pos + self.skip : pos + need]
            # Copied: a view would keep the whole read alive for a few bytes of it.
            tail = bytes(view[pos:])
            self._pieces, self._have, self._need = [tail], len(tail), need or 0
            self.begun += 1
        self._rest, self._pos = _EMPTY, 0
        raise StopIteration


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
        need = 4 + _SIZE.unpack_from(buf, pos)[0]
        if self.max_size and need > self.max_size:
            raise FrameTooLarge(need, self.max_size)
        return need
