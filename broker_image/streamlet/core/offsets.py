"""Where a reader starts, whatever its protocol: an ``OffsetSpec`` (first, last, next, an offset,
a timestamp) resolved against a stream's log. An adapter maps its own encoding to one."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .streams import Stream


class Start(Enum):
    FIRST = "first"  # the oldest message kept
    LAST = "last"  # the last chunk: its messages, then what follows
    NEXT = "next"  # what is published from now on
    OFFSET = "offset"  # ``value``, or the first kept when it was removed by retention
    TIMESTAMP = "timestamp"  # the first chunk stored at or after ``value`` (ms since the epoch)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    start: Start
    value: int = 0


def resolve(stream: Stream, spec: OffsetSpec) -> int:
    """The offset the reader's first chunk must contain (or follow)."""
    stream.flush()  # "next" and "last" see every confirmed message
    lg = stream.log
    if spec.start is Start.FIRST:
        return lg.first_offset
    if spec.start is Start.LAST:
        last = lg.last_chunk()
        return last.chunk_id if last is not None else lg.next_offset
    if spec.start is Start.NEXT:
        return lg.next_offset
    if spec.start is Start.OFFSET:
        return max(spec.value, lg.first_offset)
    ref = lg.find_timestamp(spec.value)
    return ref.chunk_id if ref is not None else lg.next_offset
