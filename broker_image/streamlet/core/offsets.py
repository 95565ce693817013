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
    """The offset the reader's first chunk must contain (or follow). ``last`` and ``next`` are
    taken at the commit: a reader never starts on what could still be truncated."""
    stream.flush()  # "next" and "last" see every confirmed message
    lg, end = stream.log, stream.commit_end
    if spec.start is Start.FIRST:
        return lg.first_offset
    if spec.start is Start.LAST:
        last = stream.committed_chunk_id
        return last if last >= 0 else end
    if spec.start is Start.NEXT:
        return end
    if spec.start is Start.OFFSET:
        return max(spec.value, lg.first_offset)
    ref = lg.find_timestamp(spec.value)
    return ref.chunk_id if ref is not None and ref.chunk_id < end else end
