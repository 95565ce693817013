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
from ...storage.chunk import HEADER_SIZE, ChunkError, iter_records

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
        #: the next offset to read from the log; ``ahead`` holds what was read and not sent
        self.cursor = start
        self.ahead: deque[tuple[int, memoryview | bytes]] = deque()
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
                size += self._send_next(out)
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
            offset = ref.chunk_id
            for body in iter_records(data[HEADER_SIZE : HEADER_SIZE + ref.data_length]):
                if offset >= self.cursor and (end is None or offset < end):
                    self.ahead.append((offset, body))
                offset += 1
            self.cursor = max(self.cursor, ref.chunk_id + ref.num_records)
        return bool(self.ahead)

    def _send_next(self, out: list[bytes | memoryview]) -> int:
        """Frames for the next element (or packed run) into ``out``; returns their bytes."""
        offset, body = self.ahead[0]
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
            out += [on_next_head(self.id, len(body)), body]
        else:
            last = (len(body) - 1) // split * split
            for at in range(0, last, split):
                out.append(encode(OnNextPart(self.id, offset, bytes(body[at : at + split]))))
            out.append(encode(OnNextLastPart(self.id, offset, bytes(body[last:]))))
        return sum(len(b) for b in out[start:])

    def _packed_run(self) -> list[memoryview | bytes]:
        """Take the elements that can go in one onNextPacked: consecutive offsets, each
        ``element_size`` bytes, within demand and the split size."""
        ahead, size = self.ahead, self.element_size
        most = min(self.demand, max(self.sink.split_bytes // size, 1))
        first = ahead[0][0]
        n = 0
        while n < len(ahead) and n < most and ahead[n][0] == first + n and len(ahead[n][1]) == size:
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
