"""FETCH as a long poll over the core's pull reads (``Stream.fetch`` + ``when_stored``).

A request names several streams (request indexes). Until ``min_bytes`` are available across
them nothing is sent (the gate); then each stream is answered, in a frame of its own, as soon
as it has data, up to its ``batch_max_bytes`` (one record batch at least, so a batch bigger
than that still comes). At ``max_wait_ms`` the streams still unanswered are answered with what
they have (or nothing) in one last frame. The frame that answers the last request index has the
response-end flag. A record batch is one stored message: each goes as a FetchResult of its own,
with its offset (streamlet's ``base_offset``), its bytes in the payload in the same order.
"""

from __future__ import annotations

import asyncio
import struct
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

_U32 = struct.Struct(">I")

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


def read_records(stream: Stream, start: int, max_bytes: int) -> list[Record]:
    """The committed records of ``stream`` from ``start``, within ``max_bytes``: ``take``'s
    rule, with simple entries cut inline (no generator per record: this is FETCH's hot path)."""
    out: list[Record] = []
    size = 0
    u32 = _U32.unpack_from
    for ref, chunk in stream.fetch(start, max_bytes):
        data = chunk[HEADER_SIZE : HEADER_SIZE + ref.data_length]
        offset, pos, end = ref.chunk_id, 0, ref.data_length
        while pos < end:
            if data[pos] & 0x80:  # a sub-entry batch: the general reader for the rest
                for body in iter_records(data[pos:]):
                    if offset >= start:
                        if out and size + len(body) > max_bytes:
                            return out
                        out.append((offset, body))
                        size += len(body)
                    offset += 1
                break
            if end - pos < 4:
                raise ChunkError("truncated entry header")
            n = u32(data, pos)[0]
            pos += 4
            if pos + n > end:
                raise ChunkError("truncated entry")
            if offset >= start:
                if out and size + n > max_bytes:
                    return out
                out.append((offset, data[pos : pos + n]))
                size += n
            offset += 1
            pos += n
    return out


@dataclass(slots=True)
class Entry:
    info: FetchInfoT
    stream: Stream | None
    error: tuple[int, str] | None = None
    records: list[Record] = field(default_factory=list)
    watching: bool = False  # a when_stored callback is registered
    answered: bool = False

    @property
    def size(self) -> int:
        return sum(len(b) for _, b in self.records)


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
                after = e.records[-1][0] + 1 if e.records else e.info.fetchOffset
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
            payload: list[memoryview | bytes] = [b"".join([b for _, b in e.records])
                                                 for e in entries if e.records]
            header = fetch_response([(e.info.requestIndex, e.info.streamId, e.records)
                                     for e in entries])
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
            for offset, body in e.records:
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
