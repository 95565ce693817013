"""RabbitMQ's offset specification (first, last, next, offset, timestamp) resolved against a
stream's log: where a Subscribe or a ResolveOffsetSpec starts."""

from __future__ import annotations

from ..core.streams import Stream
from ..protocol import OffsetType


def resolve_start(stream: Stream, offset_type: int, offset: int) -> int:
    """The offset the subscription's first chunk must contain (or follow)."""
    stream.flush()  # "next" and "last" see every confirmed message
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
