"""A subscription: a cursor into a stream's log, sending whole stored chunks while it has credit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol import OffsetType

if TYPE_CHECKING:
    from .connection import Connection
    from .filtering import Matcher
    from .streams import Stream

#: Bytes read from the log per batch of chunks.
READ_BYTES = 1 << 20


def resolve_start(stream: Stream, offset_type: int, offset: int) -> int:
    """The offset the subscription's first chunk must contain (or follow)."""
    lg = stream.log
    if offset_type == OffsetType.FIRST:
        return lg.first_offset
    if offset_type == OffsetType.LAST:
        last = lg.last_chunk()
        return last.chunk_id if last is not None else lg.next_offset
    if offset_type == OffsetType.NEXT:
        return lg.next_offset
    if offset_type == OffsetType.OFFSET:
        return max(offset, lg.first_offset)
    if offset_type == OffsetType.TIMESTAMP:
        ref = lg.find_timestamp(offset)
        return ref.chunk_id if ref is not None else lg.next_offset
    raise ValueError(f"unknown offset type {offset_type}")


class Subscription:
    __slots__ = ("conn", "id", "stream", "credit", "cursor", "properties", "active", "matcher",
                 "sac_key")

    def __init__(self, conn: Connection, sub_id: int, stream: Stream, start: int, credit: int,
                 properties: dict[str, str]) -> None:
        self.conn = conn
        self.id = sub_id
        self.stream = stream
        self.credit = credit
        #: next chunk to send is the one containing this offset, or the first after it
        self.cursor = start
        self.properties = properties
        #: False while a single active consumer waits for its turn (or for its ConsumerUpdate answer)
        self.active = True
        #: the subscription's filter (filter.N properties), None when it takes every chunk
        self.matcher: Matcher | None = None
        self.sac_key: tuple[int, str] | None = None

    def pump(self) -> None:
        """Send chunks while there is credit, data, and room in the socket's buffer."""
        lg = self.stream.log
        conn = self.conn
        if not self.active:
            return
        while self.credit > 0 and not conn.paused and self.cursor < lg.next_offset:
            ref = lg.find_chunk(self.cursor)
            if ref is None:
                return
            for chunk, data in lg.read_chunks(ref, READ_BYTES):
                if self.matcher is not None and not self.matcher.accepts(lg, chunk):
                    self.cursor = chunk.chunk_id + chunk.num_records  # skipped: costs no credit
                    continue
                conn.send_chunk(self.id, data, lg.committed_chunk_id)
                self.credit -= 1
                self.cursor = chunk.chunk_id + chunk.num_records
                if self.credit == 0 or conn.paused:
                    return
