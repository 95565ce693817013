"""APPEND: each record batch of a frame becomes one message of its stream (one simple entry, as a
RabbitMQ Publish of that body stores it), published through a core Publisher as MEGA's PRODUCE
is; its answer goes out once the core confirms it (written, or on a majority of a replicated
stream), with the offset it got.

Answers are grouped per confirm (one response frame per request frame per confirm, the last
with the response-end flag); ``start_run`` takes the usual frame (one AppendRun to one stream),
``start`` any other. No Python runs per batch on the hot path.
Mechanism: docs/protocols/sbp.md#append-a-record-batch-is-one-message.
"""

from __future__ import annotations

import struct
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...core.batch import PublishBatch
from ...core.ports import PublisherSession, Refusal
from ...core.streams import Publisher, Stream
from ...sbp import ErrorCode, Malformed, Opcode, status
from ...sbp.fbs.AppendResponse import AppendResponseT
from ...sbp.fbs.AppendResult import AppendResultT
from ...sbp.flat import (
    PREFIXED,
    RunAnswer,
    UsualAppend,
    append_columns,
    append_prefixed,
    append_response,
    append_run_frames,
    append_run_response,
    append_runs,
    prefixed_lengths,
)
from ...storage.entries import consecutive_ids, join_simple


class AppendingConnection(PublisherSession, Protocol):
    """What appends use of their connection (connection.SbpConnection): the stream to append
    to, the answers, and the core's PublisherSession its Publishers report to."""

    def writable_stream(self, sid: int) -> Stream | tuple[int, str]: ...
    def write(self, data: bytes) -> None: ...
    def answer(self, opcode: int, sid: int, table: Any,
               payload: list[memoryview | bytes] | None = None, end: bool = True) -> None: ...
    def answers_raw(self, opcode: int, answers: list[tuple[int, bytes, bool]]) -> None: ...
    def system_error(self, opcode: int, sid: int, code: int, message: str) -> None: ...
    def maybe_done(self) -> None: ...


_U64 = struct.Struct(">Q")

#: The core's reasons for refusing a publish, as SBP codes.
REFUSALS = {Refusal.GONE: (ErrorCode.STREAM_NOT_FOUND, "the stream was deleted"),
            Refusal.MOVED: (ErrorCode.NOT_PRIMARY, "the stream moved to another broker"),
            Refusal.WRITE_FAILED: (ErrorCode.STORAGE_ERROR, "the broker could not write it")}

#: (stream id, request index): what an answer names
Item = tuple[int, int]


def now_ms() -> int:
    return int(time.time() * 1000)


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """The runs of equal stream ids, as (from, to) positions."""
    out, i = [], 0
    while i < len(ids):
        j = i + 1
        while j < len(ids) and ids[j] == ids[i]:
            j += 1
        out.append((i, j))
        i = j
    return out


#: a request's batches to one stream: (stream id, request indexes, lengths, whether each batch
#: is behind its length in the payload)
Run = tuple[int, Sequence[int], list[int], bool]


def _batches(header: bytes | memoryview, payload: memoryview) -> list[Run]:
    """A request's batches as runs to one stream. The document's form, a table per batch, is
    read a column at a time and cut where the stream changes; streamlet's AppendRuns are runs
    already, their indexes a ``range`` (answered as runs too), their lengths in
    ``batch_lengths`` or, with ``length_prefixed``, in the payload. Malformed unless the
    batches fill the payload."""
    runs = append_runs(header)
    ids, indexes, lengths = append_columns(header)
    prefixed = append_prefixed(header)
    if runs is not None:
        if ids:
            raise Malformed("append_requests and append_runs in one request")
        return _runs_of(runs, prefixed, payload)
    if prefixed:
        raise Malformed("length_prefixed is for append_runs, not append_requests")
    if min(lengths, default=0) < 0 or sum(lengths) != len(payload):
        raise _unfilled(payload)
    if ids and ids.count(ids[0]) == len(ids):  # one stream for the whole frame: usual
        return [(ids[0], indexes, lengths, False)]
    return [(ids[i], indexes[i:j], lengths[i:j], False) for i, j in _runs(ids)]


def _runs_of(runs: list[tuple[int, int, list[int], int]], prefixed: bool,
             payload: memoryview) -> list[Run]:
    out: list[Run] = []
    at = 0
    for sid, first, sizes, count in runs:
        if prefixed:
            if sizes:
                raise Malformed("an AppendRun with length_prefixed gives batch_count, "
                                "not batch_lengths")
            if count < 0:
                raise Malformed(f"an AppendRun of {count} batches")
            sizes, at = prefixed_lengths(payload, count, at)
        elif count:
            raise Malformed("an AppendRun gives batch_count only with length_prefixed")
        elif min(sizes, default=0) < 0:
            raise _unfilled(payload)
        else:
            at += sum(sizes)
        out.append((sid, range(first, first + len(sizes)), sizes, prefixed))
    if at != len(payload):
        raise _unfilled(payload)
    return out


def _unfilled(payload: memoryview) -> Malformed:
    return Malformed(f"batch lengths do not add up to the payload's {len(payload)} bytes")


@dataclass(slots=True)
class Frame:
    """One APPEND request frame: its answers still to come."""

    stream_id: int  # the frame's (request-response) stream identifier
    remaining: int


@dataclass(slots=True)
class Group:
    """A frame's consecutive batches to one stream, published as one PublishBatch: publishing
    ids ``first``..``first + len(indexes) - 1``, in request order. The core may cut it into
    parts (one chunk each); each part is placed (its offset) and confirmed on its own."""

    frame: Frame
    stream: Stream
    stream_id: int
    first: int
    indexes: Sequence[int]  # a range for an AppendRun's batches
    left: int = 0  # batches not answered yet
    done: list[tuple[int, int]] = field(default_factory=list)  # answered (from, count)


def refused(item: Item, code: int, message: str) -> AppendResultT:
    r = AppendResultT()
    r.streamId, r.requestIndex = item
    r.baseOffset, r.streamAppendTimeMs = -1, now_ms()
    r.status = status(code, message)
    return r


@dataclass
class Appends:
    """A connection's appends in flight and its core Publishers (one per stream)."""

    conn: AppendingConnection
    publishers: dict[Stream, Publisher] = field(default_factory=dict)
    by_id: dict[int, Publisher] = field(default_factory=dict)
    #: the groups in flight by their first publishing id, and those ids in order (bisect)
    waiting: dict[int, Group] = field(default_factory=dict)
    starts: list[int] = field(default_factory=list)
    #: a part's first publishing id -> its offset (PublisherSession.placed, before its confirm)
    offsets: dict[int, int] = field(default_factory=dict)
    next_publisher: int = 0
    next_id: int = 0

    def start(self, sid: int, header: bytes | memoryview, payload: memoryview) -> None:
        try:
            runs = _batches(header, payload)
        except Malformed as e:
            self.conn.system_error(Opcode.APPEND, sid, ErrorCode.INVALID_REQUEST, str(e))
            return
        count = sum(len(lengths) for _, _, lengths, _ in runs)
        frame = Frame(sid, count)
        now: list[AppendResultT] = []
        streams: dict[int, Stream | tuple[int, str]] = {}
        at = 0
        for stream_id, indexes, lengths, prefixed in runs:
            size = sum(lengths) + 4 * len(lengths) * prefixed
            got = streams.get(stream_id)
            if got is None:
                got = streams[stream_id] = self.conn.writable_stream(stream_id)
            if isinstance(got, tuple):
                now += [refused((stream_id, idx), *got) for idx in indexes]
            elif lengths:
                part = payload[at : at + size]
                self._publish(frame, got, stream_id, indexes,
                              part if prefixed else join_simple(part, lengths))
            at += size
        if now or not count:
            self.answer_refused(frame, now)

    def start_run(self, raw: memoryview, run: UsualAppend) -> None:
        """The usual frame, one run of batches to one stream, checked by ``append_run``."""
        sid, stream_id, index, count, lengths_at, payload_at = run
        frame = Frame(sid, count)
        indexes = range(index, index + count)
        got = self.conn.writable_stream(stream_id)
        if isinstance(got, tuple):
            self.answer_refused(frame, [refused((stream_id, idx), *got) for idx in indexes])
            return
        payload = raw[payload_at:]
        # Each batch as a simple entry (its size, its bytes): already so when length-prefixed,
        # so the payload is stored as it arrived; else joined behind their lengths, in C.
        entries = payload if lengths_at == PREFIXED else \
            join_simple(payload, raw[lengths_at : lengths_at + 4 * count])
        self._publish(frame, got, stream_id, indexes, entries)

    def _publish(self, frame: Frame, stream: Stream, stream_id: int, indexes: Sequence[int],
                 entries: bytes | memoryview) -> None:
        """Publish ``entries``, a simple entry per batch of ``indexes``, as one PublishBatch."""
        pub = self.publishers.get(stream)
        if pub is None:
            self.next_publisher += 1
            pub = Publisher(self.next_publisher, None, stream, self.conn, wants_offsets=True)
            self.publishers[stream] = self.by_id[pub.id] = pub
            stream.attach_publisher(pub)
        n = len(indexes)
        first = self.next_id + 1
        self.next_id += n
        # Registered first: a refusal answers it during publish.
        self.waiting[first] = Group(frame, stream, stream_id, first, indexes, n)
        self.starts.append(first)
        stream.publish(pub, PublishBatch(pub.id, n, consecutive_ids(first, n), entries, n, first,
                                         first + n - 1, True, simple=True))

    def _group(self, pid: int) -> Group | None:
        i = bisect_right(self.starts, pid) - 1
        if i < 0:
            return None
        g = self.waiting.get(self.starts[i])
        return g if g is not None and pid < g.first + len(g.indexes) else None

    def _settle(self, g: Group, at: int, count: int) -> None:
        """Batches ``at``..``at + count - 1`` of ``g`` are answered."""
        g.left -= count
        g.done.append((at, count))
        if g.left <= 0:
            del self.waiting[g.first]
            self.starts.remove(g.first)

    # --- answers -------------------------------------------------------------------------------

    def answer_refused(self, frame: Frame, results: list[AppendResultT]) -> None:
        frame.remaining -= len(results)
        header = AppendResponseT()
        header.throttleTimeMs = 0
        header.status = status()
        header.appendResponses = results
        self.conn.answer(Opcode.APPEND, frame.stream_id, header, end=frame.remaining <= 0)

    def answer_done(self, frames: list[tuple[Frame, list[tuple[Sequence[int], int, int, int]]]],
                    usual: list[RunAnswer]) -> None:
        """An answer per frame, all in one write; ``usual``: whole answers already made."""
        other = []
        for frame, runs in frames:
            frame.remaining -= sum(len(r[0]) for r in runs)
            end = frame.remaining <= 0
            indexes = runs[0][0]
            if len(runs) == 1 and isinstance(indexes, range):  # one run: one result
                _, sid, offset, ms = runs[0]
                usual.append((frame.stream_id, end, indexes.start, len(indexes), sid, offset, ms))
            elif isinstance(indexes, range):  # streamlet's AppendRuns: a result per run
                other.append((frame.stream_id, append_run_response(runs), end))
            else:
                other.append((frame.stream_id, append_response(runs), end))  # type: ignore[arg-type]
        if usual:
            self.conn.write(append_run_frames(usual))
        if other:
            self.conn.answers_raw(Opcode.APPEND, other)

    # --- the core's PublisherSession, for the connection ----------------------------------------

    def confirmed(self, ids: list[bytes]) -> None:
        by_frame: dict[int, tuple[Frame, list[tuple[Sequence[int], int, int, int]]]] = {}
        failed: list[tuple[Group, int, int]] = []
        whole: list[RunAnswer] = []
        ms = now_ms()
        waiting, offsets = self.waiting, self.offsets
        for blob in ids:
            first = _U64.unpack_from(blob, 0)[0]
            count = len(blob) // 8
            g = waiting.get(first)
            # The usual: the whole of a frame that was one run, confirmed at once: one result
            # answers it, and no more bookkeeping than forgetting it.
            if g is not None and count == g.frame.remaining == len(g.indexes) \
                    and type(g.indexes) is range and first in offsets:
                del waiting[first]
                self.starts.remove(first)
                g.frame.remaining = 0
                whole.append((g.frame.stream_id, True, g.indexes.start, count, g.stream_id,
                              offsets.pop(first), ms))
                continue
            g = self._group(first)
            if g is None:
                continue
            offset = self.offsets.pop(first, -1)
            at = first - g.first
            if offset < 0 or at + count > len(g.indexes):  # a bug, said as one
                failed.append((g, at, min(count, len(g.indexes) - at)))
                continue
            by_frame.setdefault(id(g.frame), (g.frame, []))[1].append(
                (g.indexes[at : at + count] if at or count < len(g.indexes) else g.indexes,
                 g.stream_id, offset, ms))
            self._settle(g, at, count)
        if by_frame or whole:
            self.answer_done(list(by_frame.values()), whole)
        for g, at, count in failed:
            self._settle(g, at, count)
            self.answer_refused(g.frame, [refused((g.stream_id, i), ErrorCode.UNKNOWN,
                                                  "no offset was given")
                                          for i in g.indexes[at : at + count]])
        self.conn.maybe_done()

    def placed(self, first_id: int, offset: int) -> None:
        self.offsets[first_id] = offset

    def rejected(self, ids: list[int], why: Refusal) -> None:
        code, message = REFUSALS[why]
        by_frame: dict[int, tuple[Frame, list[AppendResultT]]] = {}
        for pid in ids:
            g = self._group(pid)
            if g is None:
                continue
            self.offsets.pop(pid, None)
            at = pid - g.first
            by_frame.setdefault(id(g.frame), (g.frame, []))[1].append(
                refused((g.stream_id, g.indexes[at]), code, message))
            self._settle(g, at, 1)
        for frame, results in by_frame.values():
            self.answer_refused(frame, results)
        self.conn.maybe_done()

    def drop(self, stream: Stream, code: ErrorCode, message: str) -> None:
        """The stream is gone or moved: answer what waits on it, forget its publisher."""
        pub = self.publishers.pop(stream, None)
        if pub is not None:
            self.by_id.pop(pub.id, None)
            stream.detach_publisher(pub, confirm_first=False)
        by_frame: dict[int, tuple[Frame, list[AppendResultT]]] = {}
        for g in [g for g in self.waiting.values() if g.stream is stream]:
            answered = [False] * len(g.indexes)
            for at, count in g.done:
                answered[at : at + count] = [True] * count
            rest = [k for k, done in enumerate(answered) if not done]
            by_frame.setdefault(id(g.frame), (g.frame, []))[1].extend(
                refused((g.stream_id, g.indexes[k]), code, message) for k in rest)
            for k in rest:
                self.offsets.pop(g.first + k, None)
            self._settle(g, 0, len(rest))
        for frame, results in by_frame.values():
            self.answer_refused(frame, results)
        self.conn.maybe_done()

    def release(self) -> None:
        for pub in self.publishers.values():
            pub.stream.detach_publisher(pub, confirm_first=False)  # nobody to answer
        self.publishers.clear()
        self.by_id.clear()
        self.waiting.clear()
        self.starts.clear()
        self.offsets.clear()
