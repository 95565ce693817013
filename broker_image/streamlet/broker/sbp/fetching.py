"""FETCH as a long poll over the core's pull reads (``Stream.fetch`` + ``when_stored``).

A request names several streams. Until ``min_bytes`` are available across them nothing is sent;
then each stream is answered as soon as it has data, up to its ``batch_max_bytes`` (one record
batch at least), in frames of about ``PIECE`` bytes read only while the client keeps up; at
``max_wait_ms`` the rest are answered with what they have. The last frame carries the
response-end flag. No Python runs per record batch on the way out.
Mechanism: docs/protocols/sbp.md#fetch-a-long-poll-answered-per-stream.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from ...core.streams import Stream
from ...sbp import ErrorCode, Opcode, status
from ...sbp.fbs.FetchInfo import FetchInfoT
from ...sbp.fbs.FetchRequest import FetchRequestT
from ...sbp.fbs.FetchResponse import FetchResponseT
from ...sbp.fbs.FetchResult import FetchResultT
from ...sbp.flat import fetch_prefixed_response, fetch_response, fetch_run_response
from ...storage.chunk import HEADER_SIZE, ChunkError, iter_records
from ...storage.entries import BATCH, FULL, cut_simple
from ...storage.layout import ChunkRef
from ...storage.segment import StorageError

log = logging.getLogger("streamlet.broker")

Record = tuple[int, bytes | memoryview]
_U32 = struct.Struct(">I")

#: a stream's answer goes out in frames of about this many bytes: one frame of the whole
#: ``batch_max_bytes`` would make the broker and the client take turns (read, then send, then
#: wait while the client reads); in pieces, the client reads one while the next is cut. Each
#: frame costs both sides Python (its tables): 2 MiB, the connection's write buffer high mark,
#: read 1,000 B batches a third faster than 512 KiB pieces (docs/performance.md)
PIECE = 2 << 20
#: a stream's answer is at most this many bytes (its batch_max_bytes is capped there): with
#: pieces, an answer's size no longer sets the memory it takes
MAX_FETCH_BYTES = 64 << 20
#: chunk data a connection keeps for its next fetch (Readers)
KEPT_READER_BYTES = 8 << 20


def take(records: Iterable[Record], start: int, max_bytes: int) -> list[Record]:
    """The records from offset ``start`` on, while their bytes stay within ``max_bytes``; the
    first one always (a batch bigger than the limit would otherwise never be read). The rule
    as a model: ``Reader`` applies it a chunk at a time in C, and is tested against this."""
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


#: where the next piece of an answer comes from (next_source)
FILE, READ, STOP = "file", "read", "stop"


def next_source(chunk: ChunkRef | None, start: int, commit_end: int, budget: int, sent: int,
                file_max: int) -> str:
    """Where a length-prefixed answer's next piece comes from, ``chunk`` being the stored chunk
    holding offset ``start`` (or the first after it). FILE: that chunk whole, its data section
    sent from the segment file as it is (simple entries only, from its first offset,
    committed, within the budget and ``file_max``); STOP: the answer ends (nothing committed
    from ``start``, the budget spent, or the whole chunk past what is left of it once something
    was sent: an answer ends at a chunk's end rather than read part of one); READ: read a
    piece (the chunk has a sub-entry batch, is not known to have none, or starts earlier)."""
    if budget <= 0 or start >= commit_end or chunk is None or chunk.chunk_id >= commit_end:
        return STOP
    if chunk.chunk_id != start or not chunk.simple or chunk.data_length > file_max:
        return READ
    if chunk.data_length <= budget:
        return FILE
    return STOP if sent else READ


def gate_open(min_bytes: int, available: int) -> bool:
    """Whether a fetch may answer: ``min_bytes`` (or more) are available; <= 0 means at once."""
    return min_bytes <= 0 or available >= min_bytes


@dataclass(slots=True)
class Records:
    """Record batches read for one stream: their offsets as runs of (first, count), the
    payload bytes of each run, their lengths (none when length-prefixed), their bodies joined
    in pieces (or, length-prefixed, views of the entries as stored)."""

    runs: list[tuple[int, int]] = field(default_factory=list)
    run_bytes: list[int] = field(default_factory=list)
    lengths: array[int] = field(default_factory=lambda: array("i"))
    bodies: list[bytes | memoryview] = field(default_factory=list)
    size: int = 0  # the batches' bytes, without length prefixes: what budgets count
    count: int = 0

    def __len__(self) -> int:
        return self.count

    @property
    def last(self) -> int:
        first, count = self.runs[-1]
        return first + count - 1

    def _run(self, first: int, count: int, nbytes: int) -> None:
        """Offsets ``first``..``first + count - 1`` follow: one more run, or the last longer."""
        if self.runs and self.last + 1 == first:
            self.runs[-1] = (self.runs[-1][0], self.runs[-1][1] + count)
            self.run_bytes[-1] += nbytes
        else:
            self.runs.append((first, count))
            self.run_bytes.append(nbytes)
        self.count += count

    def add_run(self, first: int, count: int, lengths: bytes, bodies: bytes | memoryview,
                size: int) -> None:
        self._run(first, count, len(bodies))
        self.lengths.frombytes(lengths)
        self.bodies.append(bodies)
        self.size = size

    def extend(self, more: Records) -> None:
        for (first, count), nbytes in zip(more.runs, more.run_bytes, strict=True):
            self._run(first, count, nbytes)
        self.lengths.extend(more.lengths)
        self.bodies += more.bodies
        self.size += more.size

    def add(self, offset: int, body: bytes | memoryview, prefixed: bool = False) -> None:
        if prefixed:
            self.add_run(offset, 1, b"", _U32.pack(len(body)) + body, self.size + len(body))
        else:
            self.add_run(offset, 1, array("i", [len(body)]).tobytes(), bytes(body),
                         self.size + len(body))


class Reader:
    """A stream's committed records from ``start``, read a piece at a time. The chunk a piece
    stops in is kept and the next piece goes on from there: a chunk (3.6 MB of 1,000-byte
    messages, as the RabbitMQ protocol's publishers fill them) is read once, not once per
    piece. A chunk's simple entries are cut out in one call (this is FETCH's hot path)."""

    __slots__ = ("pending", "start", "stream")

    @property
    def held(self) -> int:
        """Bytes of chunk data read and not cut yet."""
        return sum(len(data) for data, _ in self.pending)

    def __init__(self, stream: Stream, start: int) -> None:
        self.stream = stream
        self.start = start  # the next offset to take
        #: chunks read and not cut to their end: (data section left, its first entry's offset)
        self.pending: deque[tuple[memoryview, int]] = deque()

    def read(self, max_bytes: int, taken: bool = False, prefixed: bool = False,
             chunk_end: bool = False) -> Records:
        """Records from ``start`` while their bytes stay within ``max_bytes``; the first always
        unless ``taken`` (a piece after the first: the answer's limit holds). ``prefixed``:
        the entries as stored (each behind its length), views of the chunk read, not copies.
        ``chunk_end``: stop at the end of a chunk once something is taken (the next piece may
        then come from the file)."""
        out = Records()
        while True:
            if not self.pending:
                if out.size >= max_bytes and (taken or len(out)) or chunk_end and len(out):
                    return out
                for ref, chunk in self.stream.fetch(self.start, max(1, max_bytes - out.size)):
                    self.pending.append((chunk[HEADER_SIZE : HEADER_SIZE + ref.data_length],
                                         ref.chunk_id))
                if not self.pending:
                    return out
            data, offset = self.pending[0]
            cut = cut_simple(data, offset, self.start, max_bytes, out.size, taken or len(out) > 0,
                             not prefixed)
            if cut.n:
                out.add_run(cut.first, cut.n, cut.lengths, cut.bodies, cut.size)
            self.start = max(self.start, cut.offset)
            if cut.stop == FULL:
                self.pending[0] = (data[cut.pos :], cut.offset)
                return out
            self.pending.popleft()
            if cut.stop == BATCH and not self._batch(data[cut.pos :], cut.offset, out,
                                                     max_bytes, taken, prefixed):
                return out

    def _batch(self, data: memoryview, offset: int, out: Records, max_bytes: int,
               taken: bool, prefixed: bool) -> bool:
        """The rest of a chunk holding a sub-entry batch, by the general reader; False once
        ``max_bytes`` is reached (the chunk is read again from there next time: rare)."""
        for body in iter_records(data):
            if offset >= self.start:
                if (taken or len(out)) and out.size + len(body) > max_bytes:
                    self.start = offset
                    return False
                out.add(offset, body, prefixed)
            offset += 1
        self.start = max(self.start, offset)
        return True


class Readers:
    """A connection's readers left by its last fetch, each with the chunk it stopped in: a
    consumer's next FETCH starts where the last answer ended, inside a chunk that would
    otherwise be read again (at 1,000 B, about a third more bytes read). At most ``limit``
    bytes of chunk data are kept; a reader is taken only by a fetch of its stream from
    exactly where it stopped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept: dict[int, Reader] = {}  # id(stream) -> reader

    def keep(self, readers: list[Reader]) -> None:
        self.kept.clear()
        room = self.limit
        for r in readers:
            held = r.held
            if held and held <= room and not r.stream.deleted:
                self.kept[id(r.stream)] = r
                room -= held

    def take(self, stream: Stream, start: int) -> Reader | None:
        r = self.kept.pop(id(stream), None)
        return r if r is not None and r.stream is stream and r.start == start else None

    def clear(self) -> None:
        self.kept.clear()


@dataclass(slots=True)
class Entry:
    info: FetchInfoT
    stream: Stream | None
    error: tuple[int, str] | None = None
    reader: Reader | None = None
    records: Records = field(default_factory=Records)  # read, not sent yet
    watching: bool = False  # a when_stored callback is registered
    answered: bool = False
    sent: int = 0  # bytes of records sent, the piece going out included
    #: bytes the gate counts without reading them: whole chunks that will go from the file,
    #: up to offset ``avail_end``
    avail: int = 0
    avail_end: int = 0

    @property
    def size(self) -> int:
        return self.records.size

    @property
    def has_data(self) -> bool:
        return bool(self.records) or self.avail > 0


class FetchingConnection(Protocol):
    """What a fetch uses of its connection (connection.SbpConnection): the stream to read, its
    readers kept between fetches, the limits, the answers (from memory or from the segment
    file) and the transport's room."""

    tls: bool
    peer: str | None
    transport: asyncio.Transport | None
    readers: Readers
    max_fetch_bytes: int
    piece_bytes: int
    file_piece_bytes: int

    def readable_stream(self, sid: int) -> Stream | tuple[int, str]: ...
    def call_later(self, delay: float, callback: Callable[..., Any],
                   *args: Any) -> asyncio.TimerHandle: ...
    def write_room(self) -> int: ...
    def write_file(self, head: bytes, fd: int, pos: int, size: int) -> None: ...
    def answer(self, opcode: int, sid: int, table: Any,
               payload: list[memoryview | bytes] | None = None, end: bool = True) -> None: ...
    def answer_raw(self, opcode: int, sid: int, header: bytes,
                   payload: list[memoryview | bytes] | None = None, end: bool = True) -> None: ...
    def answer_file(self, opcode: int, sid: int, header: bytes, fd: int, pos: int, size: int,
                    payload: int, end: bool) -> None: ...
    def goaway(self, code: int, message: str) -> None: ...
    def fetch_ended(self, fetch: Fetch) -> None: ...


class Fetch:
    def __init__(self, conn: FetchingConnection, stream_sid: int, req: FetchRequestT) -> None:
        self.conn = conn
        self.sid = stream_sid
        self.min_bytes = req.minBytes
        #: streamlet's forms: a result per run, not per batch; length-prefixed batches (which
        #: implies a result per run: pump() asks it first)
        self.run_results = bool(req.runResults)
        self.prefixed = bool(req.lengthPrefixed)
        #: whole chunks may go from the segment files (sendfile: plain TCP only)
        self.files = self.prefixed and not conn.tls
        self.entries: list[Entry] = []
        self.sending: deque[Entry] = deque()  # answered streams with pieces still to send
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
            reader = conn.readers.take(got, info.fetchOffset) or Reader(got, info.fetchOffset)
            self.entries.append(Entry(info, got, reader=reader))
        if req.maxWaitMs > 0:
            self.timer = conn.call_later(req.maxWaitMs / 1000, self.deadline)

    def start(self) -> None:
        errors = [e for e in self.entries if e.error is not None]
        if errors:  # answered at once, whatever the gate: there is nothing to wait for
            self._answer(errors)
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
            self.open = gate_open(self.min_bytes, sum(e.size + e.avail for e in waiting))
        if self.open:
            self._answer([e for e in waiting if e.has_data or e.error is not None])
        for e in self.entries:
            if not e.answered and not e.watching and e.stream is not None:
                e.watching = True
                after = e.avail_end if e.avail else \
                    e.reader.start if e.reader is not None else e.info.fetchOffset
                e.stream.when_stored(after, partial(self._woken, e))

    def _woken(self, entry: Entry) -> None:
        entry.watching = False
        self.check()

    def _collect(self, e: Entry) -> None:
        """Read the first piece of a stream's answer: enough for the gate to see min_bytes."""
        stream = e.stream
        if stream is None or e.error is not None:
            return
        if stream.deleted:
            e.error = (ErrorCode.STREAM_NOT_FOUND, "the stream was deleted")
            return
        first = min(e.info.batchMaxBytes, max(self.conn.piece_bytes, self.min_bytes))
        if e.size >= first or e.reader is None:
            return
        if self.files and not e.records:
            e.avail, e.avail_end = self._file_bytes(e, first)
            if e.avail:
                return
        try:
            e.records.extend(e.reader.read(first - e.size, len(e.records) > 0, self.prefixed))
        except ChunkError as err:
            e.error = (ErrorCode.STORAGE_ERROR, f"a stored chunk cannot be read ({err})")

    def _file_bytes(self, e: Entry, want: int) -> tuple[int, int]:
        """Without reading: the committed bytes from the reader's start in whole chunks, up to
        ``want``, and the offset after them, if the answer's first piece will be a chunk sent
        from the file; else (0, 0)."""
        _, chunk = self._source(e)
        if chunk is None or e.stream is None:
            return 0, 0
        stored, commit_end, n, after = e.stream.log, e.stream.commit_end, 0, chunk.chunk_id
        at: ChunkRef | None = chunk
        while at is not None and at.chunk_id < commit_end and n < want:
            n, after = n + at.data_length, at.next_offset
            at = stored.next_chunk(at)
        return n, after

    def _source(self, e: Entry) -> tuple[str, ChunkRef | None]:
        """next_source for ``e``'s next piece, and the chunk when it is FILE."""
        stream, reader = e.stream, e.reader
        if stream is None or reader is None or stream.deleted:
            return STOP, None
        budget = e.info.batchMaxBytes - e.sent
        if not self.files or reader.pending:
            return (READ if budget > 0 and reader.start < stream.commit_end else STOP), None
        ref = stream.log.find_chunk(reader.start)
        src = next_source(ref, reader.start, stream.commit_end, budget, e.sent,
                          self.conn.file_piece_bytes)
        return src, ref if src == FILE else None

    def _next_piece(self, e: Entry, first: bool = False) -> Records:
        """The piece after ``e.records`` (or, ``first``, the answer's first), within the
        stream's batch_max_bytes; nothing once the budget is spent or the stream has no more
        (or its chunk cannot be read now: the client asks again from there and is told; the
        first piece says so)."""
        budget = e.info.batchMaxBytes - e.sent
        if budget <= 0 or e.reader is None or e.stream is None or e.stream.deleted:
            return Records()
        try:
            return e.reader.read(min(self.conn.piece_bytes, budget), not first, self.prefixed,
                                 self.files)
        except ChunkError as err:
            if first:
                e.error = (ErrorCode.STORAGE_ERROR, f"a stored chunk cannot be read ({err})")
            return Records()

    def _more(self, e: Entry) -> bool:
        """Whether ``e``'s answer goes on after the piece going out (a piece to be read is
        read now, into ``e.records``: the piece going out says whether it is the last)."""
        src, _ = self._source(e)
        if src == READ:
            e.records = self._next_piece(e)
            return bool(e.records)
        return src == FILE

    def deadline(self) -> None:
        """max_wait_ms passed: every stream still unanswered gets what it has."""
        self.timer = None
        if self.done:
            return
        rest = [e for e in self.entries if not e.answered]
        for e in rest:
            self._collect(e)
        self._answer(rest)

    def _answer(self, entries: list[Entry]) -> None:
        """Answer ``entries``: errors and empty answers in one frame now, data in pieces."""
        for e in entries:
            e.answered = True
        plain = [e for e in entries if e.error is not None or not e.has_data]
        self.sending.extend(e for e in entries if e.error is None and e.has_data)
        ended = all(e.answered for e in self.entries) and not self.sending
        if plain or ended:
            self._send_tables(plain, ended)
        if ended:
            self.finish()
        else:
            self.pump()

    def pump(self) -> None:
        """Send the answered streams' pieces while the client keeps up (the connection calls
        this again once it reads)."""
        while self.sending and not self.done and self.conn.write_room() > 0:
            e = self.sending[0]
            piece, e.records, chunks = e.records, Records(), []
            if not piece:  # the answer's first piece, or the one after chunks from the file
                src, chunk = self._source(e)
                if chunk is not None:
                    chunks = self._file_run(e, chunk)
                elif src == READ:
                    piece = self._next_piece(e, first=not e.sent)
            e.avail = 0
            if chunks:
                e.sent += sum(c.data_length for c in chunks)
                assert e.reader is not None
                e.reader.start = chunks[-1].next_offset
            elif piece:
                e.sent += piece.size
            else:  # nothing after all (retention, a deletion, a chunk unreadable)
                self.sending.popleft()
                end = not self.sending and all(x.answered for x in self.entries)
                if not e.sent or end:
                    self._send_tables([e] if not e.sent else [], end)
                if end:
                    self.finish()
                continue
            if not self._more(e):
                self.sending.popleft()
            end = not self.sending and all(x.answered for x in self.entries)
            if chunks:
                self._send_chunks(e, chunks, end)
                continue
            if self.prefixed:
                header = fetch_prefixed_response([(e.info.requestIndex, e.info.streamId,
                                                   piece.runs, piece.run_bytes)])
            elif self.run_results:
                header = fetch_run_response([(e.info.requestIndex, e.info.streamId, piece.runs,
                                              piece.lengths, piece.size)])
            else:
                header = fetch_response([(e.info.requestIndex, e.info.streamId, piece.runs,
                                          piece.lengths)])
            self.conn.answer_raw(Opcode.FETCH, self.sid, header, piece.bodies, end=end)
            if end:
                self.finish()

    def _file_run(self, e: Entry, chunk: ChunkRef) -> list[ChunkRef]:
        """``chunk`` and the chunks after it that go in the same frame: simple, committed,
        their offsets following on, within the budget and a frame (one frame of many small
        chunks costs both sides less than a frame each)."""
        assert e.stream is not None
        stored, commit_end = e.stream.log, e.stream.commit_end
        room = min(e.info.batchMaxBytes - e.sent, self.conn.file_piece_bytes)
        run, size = [chunk], chunk.data_length
        at = stored.next_chunk(chunk)
        while (at is not None and at.simple and at.chunk_id == run[-1].next_offset
               and at.chunk_id < commit_end and size + at.data_length <= room):
            run.append(at)
            size += at.data_length
            at = stored.next_chunk(at)
        return run

    def _send_chunks(self, e: Entry, chunks: list[ChunkRef], end: bool) -> None:
        """One frame: ``chunks``' records as one run, their data sections sent from the
        segment files (no copy through the process where the socket takes them at once)."""
        assert e.stream is not None
        size = sum(c.data_length for c in chunks)
        count = chunks[-1].next_offset - chunks[0].chunk_id
        header = fetch_prefixed_response([(e.info.requestIndex, e.info.streamId,
                                           [(chunks[0].chunk_id, count)], [size])])
        stored, first = e.stream.log, True
        for c in chunks:
            try:
                fd = stored.segment_fd(c)  # found a moment ago: there unless opening it fails
            except (StorageError, OSError) as err:  # the frame cannot be kept: close
                log.warning("connection %s: chunk %d cannot be sent: %s", self.conn.peer,
                            c.chunk_id, err)
                if first:  # nothing of the frame went out: the client can be told why
                    self.conn.goaway(ErrorCode.STORAGE_ERROR,
                                     f"a stored chunk cannot be read ({err})")
                elif self.conn.transport is not None:  # a frame cut short: nothing more
                    self.conn.transport.abort()
                return
            at = c.pos + HEADER_SIZE + c.bloom_size
            if first:
                self.conn.answer_file(Opcode.FETCH, self.sid, header, fd, at, c.data_length,
                                      size, end)
                first = False
            else:
                self.conn.write_file(b"", fd, at, c.data_length)
        if end:
            self.finish()

    def _send_tables(self, entries: list[Entry], end: bool) -> None:
        """An answer through the generated object API: errors and empty answers."""
        results: list[FetchResultT] = []
        for e in entries:
            if e.error is not None:
                results.append(_result(e.info, 0, -1, *e.error))
            else:
                results.append(_result(e.info, 0, -1))
        header = FetchResponseT()
        header.throttleTimeMs = 0
        header.status = status()
        header.fetchResponses = results
        self.conn.answer(Opcode.FETCH, self.sid, header, [], end=end)

    def finish(self) -> None:
        self.done = True
        self.sending.clear()
        self.conn.readers.keep([e.reader for e in self.entries if e.reader is not None])
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
