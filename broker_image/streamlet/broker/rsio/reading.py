"""A client's subscription to a stream (publisher string mode=read): a cursor into the log that
sends committed messages, one element each, while the subscriber has demand.

Demand counts messages (a sub-entry batch's records are one element each). An element longer
than the connection's split size goes as onNextPart frames and an onNextLastPart (its element
id is its offset); with ``element_size``, runs of elements go as onNextPacked. With extension 1
(offsets) a Position message precedes the first element and any element whose offset is not
the one after the previous element's (tracking chunks and retention leave gaps).
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from ...core.ports import Watcher
from ...core.streams import Stream
from ...rsio import OnNextLastPart, OnNextPacked, OnNextPart, Position, encode
from ...rsio.codec import on_next_head
from ...rsio.runs import on_next_run
from ...storage.chunk import HEADER_SIZE, ChunkError, iter_records
from ...storage.entries import cut_simple

#: Bytes read from the log at a time (a run of chunks), kept until demand lets them go.
READ_BYTES = 256 << 10
#: Bytes one pump writes at most before yielding to the event loop.
PUMP_BYTES = 1 << 20
#: RS's Long.MAX_VALUE: demand this high is unbounded.
UNBOUNDED = (1 << 63) - 1


class Sink(Protocol):
    """What a reader needs of its connection."""

    paused: bool
    closing: bool
    #: the peer asked for extension 1 (offsets)
    offsets: bool
    split_bytes: int

    def write_room(self) -> int: ...

    def writelines(self, buffers: list[bytes | memoryview]) -> None: ...

    def reader_ended(self, reader: Outbound, error: str | None) -> None:
        """Send onComplete (``error`` None) or onError, and forget the reader."""


class Outbound:
    __slots__ = ("ahead", "conn", "cursor", "demand", "done", "element_size", "end", "error",
                 "expected", "id", "sink", "stream")

    def __init__(self, sink: Sink, conn: Watcher, sub_id: int, stream: Stream, start: int,
                 end: int | None, element_size: int) -> None:
        self.sink = sink
        self.conn = conn  # the same object: the core's Reader names it, a Watcher
        self.id = sub_id
        self.stream = stream
        self.demand = 0
        #: the next offset to read from the log; ``ahead`` holds what was read and not sent:
        #: (offset, a record's body, 0), or (offset, simple entries as stored, how many of them
        #: to send) for a run of a chunk's
        self.cursor = start
        self.ahead: deque[tuple[int, memoryview | bytes | bytearray, int]] = deque()
        #: complete once every offset below it was sent (None: follow the stream forever)
        self.end = end
        self.element_size = element_size
        self.expected = -1  # the offset a client counting from the last Position expects
        self.done = False
        self.error: str | None = None

    def request(self, n: int) -> None:
        self.demand = min(self.demand + n, UNBOUNDED)
        self.pump()

    def pump(self) -> None:
        """Send elements while there is demand, data, and room in the socket's buffer; what one
        call sends goes out in one write."""
        sink = self.sink
        if self.done or sink.paused or sink.closing or self.stream.deleted:
            return
        room = min(PUMP_BYTES, sink.write_room())
        out: list[bytes | memoryview] = []
        size = 0
        try:
            while self.demand > 0 and size < room and (self.ahead or self._read()):
                size += self._send_next(out, room - size)
                if self.done:
                    break
            if not self.done and self.end is not None and not self.ahead:
                self._read()  # finds out whether the end is reached, demand or not
        except ChunkError as e:
            self._end(f"stream {self.stream.name}: a stored chunk cannot be read ({e})")
        if out:
            sink.writelines(out)  # before the onError of an element that could not go
        if self.done:
            sink.reader_ended(self, self.error)
        elif self.end is not None and not self.ahead and self.cursor >= self.end:
            self._end(None)
            sink.reader_ended(self, None)
        elif size >= room and self.demand > 0 and not sink.paused:
            self.stream.clock.call_soon(self.pump)  # more: after the loop has served others

    def _read(self) -> bool:
        """Read the next run of committed chunks into ``ahead``; False when there is none."""
        stream, end = self.stream, self.end
        if end is not None and self.cursor >= end:
            return False
        chunks = stream.fetch(self.cursor, READ_BYTES)
        if not chunks:
            if end is not None and stream.commit_end >= end:
                self.cursor = end  # only tracking chunks (no messages) were left below it
            return False
        for ref, data in chunks:
            if end is not None and ref.chunk_id >= end:
                self.cursor = end
                break
            section = data[HEADER_SIZE : HEADER_SIZE + ref.data_length]
            # the simple entries up to a sub-entry batch, if any, as one run
            cut = cut_simple(section, ref.chunk_id, self.cursor, 1 << 62, join=False)
            n = cut.n if end is None else min(cut.n, end - cut.first)
            if n > 0:
                self._add_run(cut.first, cut.bodies, n)
            offset = cut.offset
            for body in iter_records(section[cut.pos :]):  # the rest: record by record
                if offset >= self.cursor and (end is None or offset < end):
                    self.ahead.append((offset, body, 0))
                offset += 1
            self.cursor = max(self.cursor, ref.chunk_id + ref.num_records)
        return bool(self.ahead)

    def _add_run(self, first: int, entries: memoryview | bytes | bytearray, n: int) -> None:
        """Queue a run; with ``element_size``, joined to the run before it when it follows
        it (packed frames run on over the chunks' boundaries)."""
        ahead = self.ahead
        if self.element_size and ahead:
            offset, before, count = ahead[-1]
            if count and offset + count == first:  # (nothing of ``before`` was sent yet)
                joined = before if isinstance(before, bytearray) else bytearray(before)
                joined += entries
                ahead[-1] = (offset, joined, count + n)
                return
        ahead.append((first, entries, n))

    def _send_next(self, out: list[bytes | memoryview], room: int) -> int:
        """Frames for the next element, packed run or run of a chunk's entries (their bodies
        up to about ``room`` bytes) into ``out``; returns their bytes."""
        ahead = self.ahead
        offset, body, count = ahead[0]
        if count:
            sink = self.sink
            frames, n, pos = on_next_run(self.id, body, min(count, self.demand), room,
                                         sink.split_bytes, self.element_size)
            if n == 0:  # its first entry is sent the general way (in parts, or refused)
                view = memoryview(body)
                length = 4 + int.from_bytes(view[:4], "big")
                ahead.popleft()
                if count > 1:
                    ahead.appendleft((offset + 1, view[length:], count - 1))
                ahead.appendleft((offset, view[4:length], 0))
                return self._send_next(out, room)
            head = 0
            if sink.offsets and offset != self.expected:
                out.append(position := encode(Position(self.id, offset)))
                head = len(position)
            out.append(frames)
            if n == count:
                ahead.popleft()
            else:
                ahead[0] = (offset + n, memoryview(body)[pos:], count - n)
            self.demand -= n
            self.expected = offset + n
            return head + len(frames)
        size = self.element_size
        if size and len(body) != size:
            self._end(f"the message at offset {offset} has {len(body)} bytes, not the "
                      f"element_size {size}")
            return 0
        start = len(out)
        if self.sink.offsets and offset != self.expected:
            out.append(encode(Position(self.id, offset)))
        if size:
            run = self._packed_run()
            if len(run) > 1:
                out.append(encode(OnNextPacked(self.id, len(run), b"".join(run))))
                self.expected = offset + len(run)
                return sum(len(b) for b in out[start:])
        self.ahead.popleft()
        self.demand -= 1
        self.expected = offset + 1
        split = self.sink.split_bytes
        if len(body) <= split:
            out += [on_next_head(self.id, len(body)), memoryview(body)]
        else:
            last = (len(body) - 1) // split * split
            for at in range(0, last, split):
                out.append(encode(OnNextPart(self.id, offset, bytes(body[at : at + split]))))
            out.append(encode(OnNextLastPart(self.id, offset, bytes(body[last:]))))
        return sum(len(b) for b in out[start:])

    def _packed_run(self) -> list[memoryview | bytes | bytearray]:
        """Take the elements that can go in one onNextPacked: consecutive offsets, each
        ``element_size`` bytes, within demand and the split size."""
        ahead, size = self.ahead, self.element_size
        most = min(self.demand, max(self.sink.split_bytes // size, 1))
        first = ahead[0][0]
        n = 0
        while n < len(ahead) and n < most and ahead[n][0] == first + n and not ahead[n][2] and \
                len(ahead[n][1]) == size:
            n += 1
        if n < 2:
            return []
        run = [ahead.popleft()[1] for _ in range(n)]
        self.demand -= n
        return run

    def _end(self, error: str | None) -> None:
        """Ended: the pump says so (onComplete or onError) after what it has written."""
        self.done = True
        self.error = error
        self.ahead.clear()
