"""A subscription: a cursor into a stream's log, sending whole stored chunks while it has credit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol import OffsetType

if TYPE_CHECKING:
    from .connection import Connection
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
    __slots__ = ("conn", "id", "stream", "credit", "cursor", "properties")

    def __init__(self, conn: Connection, sub_id: int, stream: Stream, start: int, credit: int,
                 properties: dict[str, str]) -> None:
        self.conn = conn
        self.id = sub_id
        self.stream = stream
        self.credit = credit
        #: next chunk to send is the one containing this offset, or the first after it
        self.cursor = start
        self.properties = properties

    def pump(self) -> None:
        """Send chunks while there is credit, data, and room in the socket's buffer."""
        lg = self.stream.log
        conn = self.conn
        while self.credit > 0 and not conn.paused and self.cursor < lg.next_offset:
            ref = lg.find_chunk(self.cursor)
            if ref is None:
                return
            for chunk, data in lg.read_chunks(ref, READ_BYTES):
                conn.send_chunk(self.id, data, lg.committed_chunk_id)
                self.credit -= 1
                self.cursor = chunk.chunk_id + chunk.num_records
                if self.credit == 0 or conn.paused:
                    return
