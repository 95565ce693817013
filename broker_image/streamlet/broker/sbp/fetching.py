"""FETCH as a long poll over the core's pull reads (``Stream.fetch`` + ``when_stored``).

A request names several streams (request indexes). Until ``min_bytes`` are available across
them nothing is sent (the gate); then each stream is answered, in a frame of its own, as soon
as it has data, up to its ``batch_max_bytes`` (one record batch at least, so a batch bigger
than that still comes). At ``max_wait_ms`` the streams still unanswered are answered with what
they have (or nothing) in one last frame. The frame that answers the last request index has the
response-end flag. A record batch is one stored message: each goes as a FetchResult of its own,
with its offset (streamlet's ``base_offset``), its bytes in the payload in the same order.

No Python runs per record batch on the way out: a chunk's simple entries are cut out in one
call (storage.entries, in C), their offsets kept as runs and their lengths as an array, and the
answer's results written in one call (sbp.flat, in C too).
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from ...core.streams import Stream
from ...sbp import ErrorCode, Opcode, status
from ...sbp.fbs.FetchInfo import FetchInfoT
from ...sbp.fbs.FetchRequest import FetchRequestT
from ...sbp.fbs.FetchResponse import FetchResponseT
from ...sbp.fbs.FetchResult import FetchResultT
from ...sbp.flat import fetch_response
from ...storage.chunk import HEADER_SIZE, ChunkError, iter_records
from ...storage.entries import BATCH, FULL, cut_simple

if TYPE_CHECKING:
    from .connection import SbpConnection

Record = tuple[int, bytes | memoryview]


def take(records: Iterable[Record], start: int, max_bytes: int) -> list[Record]:
    """The records from offset ``start`` on, while their bytes stay within ``max_bytes``; the
    first one always (a batch bigger than the limit would otherwise never be read)."""
    out: list[Record] = []
    size = 0
    for offset, body in records:
        if offset < start:
            continue
        if out and size + len(body) > max_bytes:
            break
        out.append((offset, body))
        size += len(body)
    return out


def gate_open(min_bytes: int, available: int) -> bool:
    """Whether a fetch may answer: ``min_bytes`` (or more) are available; <= 0 means at once."""
    return min_bytes <= 0 or available >= min_bytes


@dataclass(slots=True)
class Records:
    """Record batches read for one stream: their offsets as runs of (first, count), their
    lengths, their bodies joined in pieces."""

    runs: list[tuple[int, int]] = field(default_factory=list)
    lengths: array[int] = field(default_factory=lambda: array("i"))
    bodies: list[bytes | memoryview] = field(default_factory=list)
    size: int = 0

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def last(self) -> int:
        first, count = self.runs[-1]
        return first + count - 1

    def add_run(self, first: int, lengths: bytes, bodies: bytes, size: int) -> None:
        count = len(lengths) // 4
        if self.runs and self.last + 1 == first:
            self.runs[-1] = (self.runs[-1][0], self.runs[-1][1] + count)
        else:
            self.runs.append((first, count))
        self.lengths.frombytes(lengths)
        self.bodies.append(bodies)
        self.size = size

    def add(self, offset: int, body: bytes | memoryview) -> None:
        self.add_run(offset, array("i", [len(body)]).tobytes(), bytes(body),
                     self.size + len(body))

    def pairs(self) -> list[Record]:
        """(offset, body) per record batch: for the answers written a table at a time."""
        payload, at = b"".join(self.bodies), 0
        out: list[Record] = []
        sizes = iter(self.lengths)
        for first, count in self.runs:
            for offset in range(first, first + count):
                n = next(sizes)
                out.append((offset, payload[at : at + n]))
                at += n
        return out


def read_records(stream: Stream, start: int, max_bytes: int) -> Records:
    """The committed records of ``stream`` from ``start``, within ``max_bytes``: ``take``'s
    rule, a chunk's simple entries cut out in one call (this is FETCH's hot path)."""
    out = Records()
    for ref, chunk in stream.fetch(start, max_bytes):
        data = chunk[HEADER_SIZE : HEADER_SIZE + ref.data_length]
        cut = cut_simple(data, ref.chunk_id, start, max_bytes, out.size, len(out) > 0)
        if cut.n:
            out.add_run(cut.first, cut.lengths, cut.bodies, cut.size)
        if cut.stop == FULL:
            return out
        if cut.stop == BATCH:  # a sub-entry batch: the general reader for the rest
            offset = cut.offset
            for body in iter_records(data[cut.pos :]):
                if offset >= start:
                    if len(out) and out.size + len(body) > max_bytes:
                        return out
                    out.add(offset, body)
                offset += 1
    return out


@dataclass(slots=True)
class Entry:
    info: FetchInfoT
    stream: Stream | None
    error: tuple[int, str] | None = None
    records: Records = field(default_factory=Records)
    watching: bool = False  # a when_stored callback is registered
    answered: bool = False

    @property
    def size(self) -> int:
        return self.records.size


class Fetch:
    def __init__(self, conn: SbpConnection, stream_sid: int, req: FetchRequestT) -> None:
        self.conn = conn
        self.sid = stream_sid
        self.min_bytes = req.minBytes
        self.entries: list[Entry] = []
        self.open = False
        self.done = False
        self.timer: asyncio.TimerHandle | None = None
        cap = conn.max_fetch_bytes
        for info in req.fetchRequests or []:
            info.batchMaxBytes = max(1, min(info.batchMaxBytes, cap))
            got = conn.readable_stream(info.streamId)
            if isinstance(got, tuple):
                self.entries.append(Entry(info, None, got))
                continue
            if info.fetchOffset < got.log.first_offset or info.fetchOffset > got.commit_end:
                self.entries.append(Entry(info, got, (
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"offset {info.fetchOffset} is outside {got.log.first_offset}.."
                    f"{got.commit_end}")))
                continue
            self.entries.append(Entry(info, got))
        if req.maxWaitMs > 0:
            self.timer = conn.call_later(req.maxWaitMs / 1000, self.deadline)

    def start(self) -> None:
        errors = [e for e in self.entries if e.error is not None]
        if errors:  # answered at once, whatever the gate: there is nothing to wait for
            self._send(errors)
        if self.timer is None:
            self.deadline()  # max_wait_ms <= 0: what there is now
        else:
            self.check()

    def check(self) -> None:
        """Collect what is stored; open the gate once min_bytes are there; answer the streams
        that have data once it is open; wait on the others."""
        if self.done:
            return
        waiting = [e for e in self.entries if not e.answered]
        for e in waiting:
            self._collect(e)
        if not self.open:
            self.open = gate_open(self.min_bytes, sum(e.size for e in waiting))
        if self.open:
            for e in waiting:
                if e.records or e.error is not None:
                    self._send([e])
        for e in self.entries:
            if not e.answered and not e.watching and e.stream is not None:
                e.watching = True
                after = e.records.last + 1 if e.records else e.info.fetchOffset
                e.stream.when_stored(after, partial(self._woken, e))

    def _woken(self, entry: Entry) -> None:
        entry.watching = False
        self.check()

    def _collect(self, e: Entry) -> None:
        stream = e.stream
        if stream is None or e.error is not None:
            return
        if stream.deleted:
            e.error = (ErrorCode.STREAM_NOT_FOUND, "the stream was deleted")
            return
        if e.records and e.size >= e.info.batchMaxBytes:
            return
        try:
            e.records = read_records(stream, e.info.fetchOffset, e.info.batchMaxBytes)
        except ChunkError as err:
            e.error = (ErrorCode.STORAGE_ERROR, f"a stored chunk cannot be read ({err})")

    def deadline(self) -> None:
        """max_wait_ms passed: every stream still unanswered gets what it has, in one frame."""
        self.timer = None
        if self.done:
            return
        rest = [e for e in self.entries if not e.answered]
        for e in rest:
            self._collect(e)
        self._send(rest, final=True)

    def _send(self, entries: list[Entry], final: bool = False) -> None:
        for e in entries:
            e.answered = True
        end = final or all(e.answered for e in self.entries)
        if any(e.error is not None for e in entries):
            self._send_tables(entries, end)
        elif entries or end:  # flat: one struct call per record batch, no table objects
            payload: list[memoryview | bytes] = [body for e in entries
                                                 for body in e.records.bodies]
            header = fetch_response([(e.info.requestIndex, e.info.streamId, e.records.runs,
                                      e.records.lengths) for e in entries])
            self.conn.answer_raw(Opcode.FETCH, self.sid, header, payload, end=end)
        if end:
            self.finish()

    def _send_tables(self, entries: list[Entry], end: bool) -> None:
        """The answer through the generated object API: when a result carries an error."""
        results: list[FetchResultT] = []
        payload: list[memoryview | bytes] = []
        for e in entries:
            if e.error is not None:
                results.append(_result(e.info, 0, -1, *e.error))
                continue
            if not e.records:
                results.append(_result(e.info, 0, -1))
            for offset, body in e.records.pairs():
                results.append(_result(e.info, len(body), offset))
                payload.append(body)
        header = FetchResponseT()
        header.throttleTimeMs = 0
        header.status = status()
        header.fetchResponses = results
        self.conn.answer(Opcode.FETCH, self.sid, header, payload, end=end)

    def finish(self) -> None:
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.conn.fetch_ended(self)


def _result(info: FetchInfoT, length: int, offset: int, code: int = ErrorCode.NONE,
            message: str | None = None) -> FetchResultT:
    r = FetchResultT()
    r.streamId, r.requestIndex, r.batchLength = info.streamId, info.requestIndex, length
    r.baseOffset = offset
    r.status = status(code, message)
    return r
