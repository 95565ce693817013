"""Cutting a byte stream into frames, for every protocol: ``Splitter`` (a protocol says how long
a frame is; the frame-size limit is enforced before buffering) and ``ReadBuffer`` (the reads
of a server connection go into an arena; frames are handed out as views of it)."""

from __future__ import annotations

from ..native import allowed

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


try:  # in C where it was built: not zeroed, as reads fill it before it is read
    allowed("streamlet.wire._arena")
    from ._arena import arena as _arena
except ImportError:
    _arena = bytearray

#: A connection's first arena, as big as uvloop's own reads: a peer's burst is taken in few
#: reads, and a connection closed for bad input has seldom left bytes unread (which would turn
#: its close into a reset, losing the answers before it). Each next arena is twice the last, up
#: to ARENA_MAX. An arena is not zeroed: reads fill it before any of it is read.
ARENA_FIRST = 256 << 10
ARENA_MAX = 1 << 20
#: The least room a read is offered: with less left, the next read goes to a new arena.
MIN_READ = 64 << 10


class ReadBuffer:
    """Where a connection's reads land (an asyncio BufferedProtocol's ``get_buffer``), cut into
    frames by ``splitter`` as they are whole: the splitter's limits and ``measure`` apply, and
    ``held``, ``pending``, ``begun`` and ``clear`` mean what they mean on a Splitter.

    Reads go into an arena, front to back, and no byte of it is written twice: a frame is handed
    out as a view of the arena, never copied, and stays valid for as long as a handler keeps it
    (the arena lives until its last view goes). A frame that a read leaves incomplete stays
    where it is and the next read lands after it; only when the arena has too little room left
    is what arrived of it copied to the start of a new arena, one with room for the whole
    frame. (Splitter.feed takes bytes the transport already copied out of its own buffer, and
    copies and joins a frame split over reads.)
    """

    __slots__ = ("_buf", "_end", "_first", "_need", "_start", "_view", "begun", "splitter")

    def __init__(self, splitter: Splitter) -> None:
        self.splitter = splitter
        self._buf = _EMPTY  # the arena
        self._start = 0  # the first byte not handed out: the incomplete frame's, if any
        self._end = 0  # the first byte not filled
        self._need = 0  # the incomplete frame's whole length, once its first bytes say it
        self._first = -2  # where the frame left incomplete by the last read began (-1: none)
        self._view = _EMPTY  # the arena up to what was filled, while a read's frames are pulled
        self.begun = 0

    @property
    def held(self) -> int:
        """Bytes of an incomplete frame held between reads."""
        return self._end - self._start

    @property
    def pending(self) -> int:
        """The whole length of the incomplete frame held, 0 if none or unknown yet."""
        return self._need

    def clear(self) -> None:
        """Drop the arena and an incomplete frame (the connection is gone)."""
        self._buf, self._start, self._end, self._need = _EMPTY, 0, 0, 0

    def space(self) -> memoryview:
        """Where the next read goes: the arena's room after what was filled, if it is
        MIN_READ at least and holds the rest of the incomplete frame."""
        held = self._end - self._start
        rest = max(self._need - held, MIN_READ)
        if len(self._buf) - self._end < rest:
            size = min(2 * len(self._buf), ARENA_MAX) if len(self._buf) else ARENA_FIRST
            arena = memoryview(_arena(max(size, held + rest)))
            arena[:held] = self._buf[self._start : self._end]  # the incomplete frame's start
            self._buf, self._start, self._end = arena, 0, held
        return self._buf[self._end :]

    def filled(self, nbytes: int) -> ReadBuffer:
        """``nbytes`` were read into ``space()``; returns the buffer, to iterate: the frames
        now whole, one at a time, each measured when it is pulled (a handler may change a limit
        for the frames after it). Raises the splitter's FrameTooLarge after the frames before
        the oversize one."""
        self._first = self._start if self._end > self._start else -1
        self._end += nbytes
        self._view = self._buf[: self._end].toreadonly()  # frames: views no handler can write
        return self

    def ahead(self) -> memoryview:
        """The bytes of this read after the frame last handed out (empty outside a read): a
        handler may cut whole frames of them itself (a run of requests, in one call)..."""
        return self._view[self._start : self._end]

    def skip(self, n: int) -> None:
        """...and then says how many bytes of ``ahead()`` it took: pulling goes on after them."""
        assert 0 <= n <= self._end - self._start
        self._start += n

    def __iter__(self) -> ReadBuffer:
        return self

    def __next__(self) -> memoryview:
        view, pos = self._view, self._start
        if self._end > pos:
            need = self.splitter.measure(view, pos)
            if need is not None and self._end - pos >= need:
                self._start = end = pos + need
                return view[pos + self.splitter.skip : end]
            self._need = need or 0
        else:
            self._need = 0
        if self._first != -2:  # this read's end: once
            if self._end > pos and pos != self._first:
                self.begun += 1  # a frame newly left incomplete
            self._first, self._view = -2, _EMPTY
        raise StopIteration
