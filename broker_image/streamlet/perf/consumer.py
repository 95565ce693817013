"""A perf consumer: counts the records of each chunk and samples their send times.

A chunk of perf messages is uniform (simple entries of one size), so record i sits at
i * (4 + size) and its send time can be read without walking the chunk: up to ``SAMPLES``
records spread over the chunk are read, each standing for its share of the chunk's records.
Anything else (other writers' messages, sub-batches) is walked entry by entry."""

from __future__ import annotations

import struct
import time
from collections.abc import MutableSequence

from ..client import StreamletError
from ..client.connection import Connection
from ..rabbitmq import frames
from ..storage.chunk import ChunkHeader
from . import stats

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_SUB_BATCH = 0x80000000  # the entry type bit: a sub-batch, not one simple message
_SUB_BATCH_HEAD = struct.Struct(">BHII")  # type/codec, records, uncompressed size, size

#: records whose send time is read per chunk (all of them in smaller chunks)
SAMPLES = 64
#: a send time this far past the reader's clock is not a perf message's
FUTURE_NS = 60_000_000_000

#: chunks given back as credit at once; the initial credit
CREDIT_BATCH = 16
CREDIT = 64


def chunk_latencies(data: bytes | memoryview, entries: int, records: int, size: int,
                    since_ns: int, now_ns: int,
                    samples: int = SAMPLES) -> tuple[int, list[tuple[int, int]]]:
    """(records of this run, [(latency ns, records it stands for)...]) of a chunk's data.

    A record is this run's when it is a perf message (a simple entry of ``size`` bytes) sent at
    or after ``since_ns`` and not in the future."""
    stride = 4 + size
    if (entries == records and records > 0 and len(data) >= records * stride
            and _U32.unpack_from(data, 0)[0] == size
            and _U32.unpack_from(data, (records - 1) * stride)[0] == size):
        first = _U64.unpack_from(data, 4)[0]
        last = _U64.unpack_from(data, (records - 1) * stride + 4)[0]
        if since_ns <= first and last <= now_ns + FUTURE_NS:
            picks = stats.sample_indices(records, samples)
            weights = stats.weights(records, len(picks))
            return records, [(now_ns - _U64.unpack_from(data, i * stride + 4)[0], w)
                             for i, w in zip(picks, weights, strict=True)]
        if last < since_ns:
            return 0, []  # an earlier run's messages
    return _walk(data, size, since_ns, now_ns)


def _walk(data: bytes | memoryview, size: int, since_ns: int,
          now_ns: int) -> tuple[int, list[tuple[int, int]]]:
    ours, lats = 0, []
    pos, end = 0, len(data)
    while pos + 4 <= end:
        head = _U32.unpack_from(data, pos)[0]
        if head & _SUB_BATCH:
            if pos + _SUB_BATCH_HEAD.size > end:
                break
            pos += _SUB_BATCH_HEAD.size + _SUB_BATCH_HEAD.unpack_from(data, pos)[3]
            continue
        if head == size and pos + 4 + 8 <= end:
            sent = _U64.unpack_from(data, pos + 4)[0]
            if since_ns <= sent <= now_ns + FUTURE_NS:
                ours += 1
                lats.append((now_ns - sent, 1))
        pos += 4 + head
    return ours, lats


class PerfConsumer:
    """One subscription on its own connection; ``counters[slot:slot+2]`` hold the records it
    consumed and how many of them this run published."""

    def __init__(self, conn: Connection, sub_id: int, stream: str, size: int, since_ns: int,
                 counters: MutableSequence[int], slot: int) -> None:
        self.conn, self.sub_id, self.stream = conn, sub_id, stream
        self.size, self.since_ns = size, since_ns
        self.counters, self.slot = counters, slot
        self.consumed = self.ours = 0
        self.owed = 0
        self.hist: stats.Histogram = {}
        self.max_us = 0
        self.closed: StreamletError | None = None
        self._credit = frames.encode(frames.Credit(sub_id, CREDIT_BATCH))

    # --- the connection's callbacks (SubscriberHandler) ------------------------------------

    def _on_chunk(self, header: ChunkHeader, data: memoryview) -> None:
        self.owed += 1
        if self.owed >= CREDIT_BATCH:
            self.owed = 0
            self.conn.write(self._credit)
        if header.chunk_type != 0:  # tracking chunks (stored offsets) carry no messages
            return
        self.consumed += header.num_records
        ours, lats = chunk_latencies(data, header.num_entries, header.num_records, self.size,
                                     self.since_ns, time.time_ns())
        self.ours += ours
        hist = self.hist
        for ns, n in lats:
            us = ns // 1000
            stats.record(hist, us, n)
            if us > self.max_us:
                self.max_us = us
        self.counters[self.slot] = self.consumed
        self.counters[self.slot + 1] = self.ours

    def _on_consumer_update(self, correlation_id: int, active: bool) -> None:
        pass  # no single-active-consumer name is given, so the server sends none

    def _on_closed(self, exc: StreamletError) -> None:
        self.closed = exc
