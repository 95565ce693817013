"""A subscription: a cursor into a stream's log, sending whole stored chunks while it has credit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..storage import ChunkRef
from ..storage.chunk import HEADER_SIZE

if TYPE_CHECKING:
    from .filtering import Matcher
    from .ports import ReaderSession
    from .streams import Stream

#: Bytes of chunks looked up in the log at a time (their places, not their data).
RUN_BYTES = 256 << 10
#: Bytes one pump writes at most before yielding to the event loop.
PUMP_BYTES = 1 << 20
#: Chunks without a bloom filter smaller than this go to ``deliver_file`` together, up to this
#: many bytes (a connection reads such a group at once: cheaper than a sendfile each); a
#: bigger chunk goes alone.
SMALL_CHUNKS = 64 << 10


class Subscription:
    __slots__ = ("conn", "id", "stream", "credit", "_cursor", "properties", "active", "matcher",
                 "sac_key")

    def __init__(self, conn: ReaderSession, sub_id: int, stream: Stream, start: int, credit: int,
                 properties: dict[str, str]) -> None:
        self.conn = conn
        self.id = sub_id
        self.stream = stream
        self.credit = credit
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
        """Move the subscription (a single active consumer's answer)."""
        self._cursor = offset

    def pump(self) -> None:
        """Send chunks while there is credit, committed data, and room in the socket's buffer.
        A chunk without a bloom filter goes from the segment file (``deliver_file``: its header
        and data lie back to back there); one with a bloom filter is read, the bloom left out."""
        lg = self.stream.log
        conn = self.conn
        if not self.active or conn.paused or conn.closing or self.stream.deleted:
            return
        size = records = 0
        # Never far past the connection's high-water mark: a consumer that stops reading then
        # costs that buffer plus one chunk, not a whole pump more.
        room = min(PUMP_BYTES, conn.write_room())
        commits = self.stream.commits
        end = commits.end  # readers see committed chunks only
        committed = commits.chunk_id
        matcher = self.matcher
        while self.credit > 0 and size < room and self._cursor < end and not conn.paused:
            ref = lg.find_chunk(self._cursor)
            if ref is None or ref.chunk_id >= end:
                break
            run = lg.user_run(ref, RUN_BYTES, self.credit if matcher is None else 1 << 30)
            if run is None:
                break
            reads: list[memoryview] = []  # read (bloom filter left out), in order
            small: list[ChunkRef] = []  # small chunks without a bloom filter, in order
            small_size = 0
            for chunk in run.refs:
                if chunk.chunk_id >= end or self.credit <= 0 or size >= room or conn.paused:
                    break
                self._cursor = chunk.chunk_id + chunk.num_records
                if matcher is not None and not matcher.accepts(lg, chunk):
                    continue  # skipped: costs no credit
                n = HEADER_SIZE + chunk.data_length
                size += n
                records += chunk.num_records
                self.credit -= 1
                if chunk.bloom_size:
                    if small:
                        conn.deliver_file(self.id, run.fd, small, committed)
                        small, small_size = [], 0
                    reads.append(lg.read_chunks(chunk, 1)[0][1])
                    continue
                if reads:
                    conn.deliver(self.id, reads, committed)
                    reads = []
                if n < SMALL_CHUNKS:
                    small.append(chunk)
                    small_size += n
                    if small_size < SMALL_CHUNKS:
                        continue
                    conn.deliver_file(self.id, run.fd, small, committed)
                    small, small_size = [], 0
                    continue
                if small:
                    conn.deliver_file(self.id, run.fd, small, committed)
                    small, small_size = [], 0
                # alone: a socket that fills pauses the connection, and the chunks after it
                # wait, unread, for it to take more
                conn.deliver_file(self.id, run.fd, [chunk], committed)
            if small:
                conn.deliver_file(self.id, run.fd, small, committed)
            if reads:
                conn.deliver(self.id, reads, committed)
        if size:
            self.stream.messages_out += records  # the broker's metrics read these
            self.stream.bytes_out += size
            if size >= room and self.credit > 0 and not conn.paused:
                # more to send: after the loop has served others (and the socket has drained)
                self.stream.clock.call_soon(self.pump)
