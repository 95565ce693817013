"""A subscription: a cursor into a stream's log, sending whole stored chunks while it has credit."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ..storage import ChunkRef

if TYPE_CHECKING:
    from .filtering import Matcher
    from .ports import ReaderSession
    from .streams import Stream

#: Bytes read from the log at a time: a run of chunks, kept until credit lets them go out, so a
#: client that returns credit one chunk at a time costs one read per run, not per chunk.
READ_BYTES = 256 << 10
#: Bytes one pump writes at most before yielding to the event loop.
PUMP_BYTES = 1 << 20


class Subscription:
    __slots__ = ("conn", "id", "stream", "credit", "_cursor", "properties", "active", "matcher",
                 "sac_key", "_ahead")

    def __init__(self, conn: ReaderSession, sub_id: int, stream: Stream, start: int, credit: int,
                 properties: dict[str, str]) -> None:
        self.conn = conn
        self.id = sub_id
        self.stream = stream
        self.credit = credit
        #: chunks read from the log and not sent yet, in order, from the cursor on
        self._ahead: deque[tuple[ChunkRef, memoryview]] = deque()
        #: next chunk to send is the one containing this offset, or the first after it
        self._cursor = start
        self.properties = properties
        #: False while a single active consumer waits for its turn (or for its ConsumerUpdate answer)
        self.active = True
        #: the subscription's filter (filter.N properties), None when it takes every chunk
        self.matcher: Matcher | None = None
        self.sac_key: tuple[int, str] | None = None

    @property
    def cursor(self) -> int:
        return self._cursor

    @cursor.setter
    def cursor(self, offset: int) -> None:
        """Move the subscription (a single active consumer's answer): what was read ahead goes."""
        self._cursor = offset
        self._ahead.clear()

    def pump(self) -> None:
        """Send chunks while there is credit, data, and room in the socket's buffer; what one
        call sends goes out in one write (a writev of every frame), not one per chunk."""
        lg = self.stream.log
        conn = self.conn
        if not self.active or conn.paused or conn.closing or self.stream.deleted:
            return
        ahead = self._ahead
        out: list[memoryview] = []
        size = records = 0
        # Never far past the connection's high-water mark: a consumer that stops reading then
        # costs that buffer plus one chunk, not a whole pump more.
        room = min(PUMP_BYTES, conn.write_room())
        commits = self.stream.commits
        end = commits.end  # readers see committed chunks only
        while self.credit > 0 and size < room:
            if not ahead:
                if self._cursor >= end:
                    break
                ref = lg.find_chunk(self._cursor)
                if ref is None:
                    break
                ahead.extend(lg.read_chunks(ref, READ_BYTES))
            if ahead[0][0].chunk_id >= end:  # read ahead, not committed yet: kept for later
                break
            chunk, data = ahead.popleft()
            self._cursor = chunk.chunk_id + chunk.num_records
            if self.matcher is not None and not self.matcher.accepts(lg, chunk):
                continue  # skipped: costs no credit
            out.append(data)
            size += len(data)
            records += chunk.num_records
            self.credit -= 1
        if out:
            conn.deliver(self.id, out, commits.chunk_id)
            self.stream.messages_out += records  # the broker's metrics read these
            self.stream.bytes_out += size
            if size >= room and self.credit > 0 and not conn.paused:
                # more to send: after the loop has served others (and the socket has drained)
                self.stream.clock.call_soon(self.pump)
