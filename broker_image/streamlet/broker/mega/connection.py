"""One MEGA connection (docs/protocols/mega.md): requests cut by streamlet.mega's splitter, each
answered under its correlation id. Topics are the streams of virtual host "/".

CREATE_TOPIC creates the stream with the broker's default retention; the PRODUCEs to one topic
that follow each other in a read are stored as one batch of simple entries through a core
Publisher, each answered with its offset, in order, once the core confirms it; the CONSUMEs of
consecutive offsets of one topic in a read are answered together from the chunk read. A
malformed request is answered with its error code, one whose end cannot be found with its code
and a close; nothing disturbs another connection or stored data. No authentication, every right
on "/"; idle only while no PRODUCE waits for its confirm. Runs: docs/protocols/mega.md.
"""

from __future__ import annotations

import logging
import struct
import time
from array import array
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.batch import PublishBatch
from ...core.ports import Refusal
from ...core.registry import LimitReached, Streams
from ...core.streams import Publisher, Stream
from ...mega import ErrorCode, FramingLost, MegaSplitter, MessageType, Request, decode_request
from ...mega.codec import encode_error, encode_success
from ...mega.runs import (
    consume_run,
    consumed_answers,
    produce_run,
    produced_answers,
    simple_positions,
)
from ...storage.chunk import HEADER_SIZE, ChunkError, iter_records
from ...storage.entries import consecutive_ids
from ...wire.framing import FrameTooLarge
from ..arguments import parse_create_arguments, valid_stream_name
from ..replication.members import Refused
from ..transport import FramedConnection
from .settings import MegaSettings

if TYPE_CHECKING:
    from ..server import Broker

log = logging.getLogger("streamlet.broker")

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_TOPIC_AT = 9  # a request's topic starts after correlation u32, type u8, topic length u32

#: The core's reasons for refusing a publish, as MEGA codes.
REFUSAL_CODES = {Refusal.GONE: ErrorCode.TOPIC_NOT_FOUND, Refusal.MOVED: ErrorCode.NETWORK_ERROR,
                 Refusal.WRITE_FAILED: ErrorCode.INTERNAL_ERROR}


def now_ms() -> int:
    return int(time.time() * 1000)


def errors(corrs: bytes, code: ErrorCode) -> bytes:
    """Error answers of ``code`` for the packed correlation ids ``corrs``, in their order."""
    return b"".join([encode_error(c, code) for (c,) in _U32.iter_unpack(corrs)])


@dataclass(slots=True)
class _Run:
    """A run of PRODUCEs published as one batch: publishing ids ``first``..``first + n - 1``,
    one per correlation id of ``corrs`` (packed u32s), in request order. The core may cut the
    batch in parts (one chunk each), each placed (its offset) and confirmed on its own."""

    stream: Stream
    first: int
    corrs: bytes
    left: int  # requests not answered yet
    #: the requests answered apart (a part's confirm, a refusal): 1 each, in request order
    answered: bytearray = field(init=False)

    def __post_init__(self) -> None:
        self.answered = bytearray(self.left)


class MegaConnection(FramedConnection):
    def __init__(self, broker: Broker, tls: bool = False) -> None:
        settings = broker.config.settings_of("mega", MegaSettings)
        super().__init__(broker, tls, MegaSplitter(settings.max_topic_bytes,
                                                  settings.max_payload_bytes))
        self.max_payload = settings.max_payload_bytes
        vhost = broker.vhosts["/"]
        self.streams: Streams = vhost.streams
        #: one core Publisher per stream this connection produced to
        self.publishers: dict[Stream, Publisher] = {}
        self.next_publisher = 0
        self.next_id = 0  # publishing ids, one per PRODUCE, over all its publishers
        #: the chunk the last CONSUME read, its records' positions found once: a consumer asks
        #: for consecutive offsets, and re-reading and re-walking the chunk for each cost O(chunk)
        self.last_read: _ReadChunk | None = None
        #: runs of produces waiting for their confirm, by their first publishing id, and those
        #: ids in order (bisect)
        self.waiting: dict[int, _Run] = {}
        self.starts: list[int] = []
        #: a part's first publishing id -> its offset (PublisherSession.placed, before its confirm)
        self.offsets: dict[int, int] = {}

    # --- the transport's hooks ---------------------------------------------------------------

    def accepted(self) -> None:
        self.opened = True  # no handshake: the frame deadline applies from the first byte

    def busy(self) -> bool:
        return bool(self.waiting)  # produces not answered yet

    def handle_frame(self, frame: memoryview) -> None:
        # A PRODUCE (CONSUME) and those of its topic (of the next offsets) that follow it in
        # the read, cut in one call and handled as one run.
        kind = frame[4]
        if kind == MessageType.PRODUCE:
            produce = produce_run(frame, self.reader.ahead(), self.max_payload)
            if produce is not None:
                self._run(frame, produce[0], produce[1], on_produce, produce[2])
                return
        elif kind == MessageType.CONSUME:
            consume = consume_run(frame, self.reader.ahead())
            if consume is not None:
                self._run(frame, consume[0], consume[1], on_consume, consume[2])
                return
        try:
            request = decode_request(frame)
        except (ValueError, struct.error):  # the splitter measured it: cannot happen
            log.exception("connection %s: a MEGA request the splitter cut is malformed", self.peer)
            self.answer_error(_U32.unpack_from(frame)[0], ErrorCode.INTERNAL_ERROR)
            self.abort()
            return
        try:
            HANDLERS[request.type](self, request)
        except Exception:  # a bug costs this request an answer of 7, never the broker
            log.exception("connection %s: MEGA %s failed", self.peer, request.type.name)
            self.answer_error(request.correlation, ErrorCode.INTERNAL_ERROR)

    def _run(self, frame: memoryview, taken: int, corrs: bytes,
             handler: Callable[[MegaConnection, bytes, bytes, Any], None], arg: Any) -> None:
        """A run whose first request is ``frame``, the rest ``taken`` bytes after it."""
        self.reader.skip(taken)
        topic = bytes(frame[_TOPIC_AT : _TOPIC_AT + _U32.unpack_from(frame, 5)[0]])
        try:
            handler(self, topic, corrs, arg)
        except Exception:  # a bug costs these requests an answer of 7, never the broker
            log.exception("connection %s: MEGA %s failed", self.peer,
                          MessageType(frame[4]).name)
            self.write(errors(corrs, ErrorCode.INTERNAL_ERROR))

    def frame_too_large(self, error: FrameTooLarge) -> None:
        if isinstance(error, FramingLost):
            log.info("connection %s: %s, closing", self.peer, error)
            self.answer_error(error.correlation, error.code)
        self.abort()

    def lost(self) -> None:
        for pub in self.publishers.values():
            pub.stream.detach_publisher(pub, confirm_first=False)  # nobody to answer
        self.publishers.clear()
        self.waiting.clear()
        self.starts.clear()
        self.offsets.clear()
        self.last_read = None

    # --- answers -------------------------------------------------------------------------------

    def answer(self, correlation: int, timestamp: int, payload: bytes = b"") -> None:
        self.write(encode_success(correlation, timestamp, payload))

    def answer_error(self, correlation: int, code: ErrorCode) -> None:
        self.write(encode_error(correlation, code))

    def write_all(self, parts: list[bytes]) -> None:
        """``parts`` in one write (one system call), not joined first (no copy of them)."""
        t = self.transport
        if t is not None and not t.is_closing():
            t.writelines(parts)

    def stream_named(self, topic: bytes) -> str | None:
        """The stream name a topic is, or None if it cannot name one (INVALID_REQUEST)."""
        try:
            name = topic.decode()
        except UnicodeDecodeError:
            return None
        return name if valid_stream_name(name) is None else None

    def stream_of(self, topic: bytes) -> Stream | ErrorCode:
        """The stream the topic names, or why not: INVALID_REQUEST (not a stream name) or
        TOPIC_NOT_FOUND."""
        name = self.stream_named(topic)
        if name is None:
            return ErrorCode.INVALID_REQUEST
        stream = self.streams.get(name)
        return ErrorCode.TOPIC_NOT_FOUND if stream is None else stream

    # --- the core's session roles (streamlet.core.ports): PublisherSession, Watcher --------------
    # (MEGA reads by pull (fetch): no subscription, no ReaderSession)

    def confirmed(self, publisher_id: int, ids: list[bytes]) -> None:
        ts = now_ms()
        out: list[bytes] = []
        waiting, offsets = self.waiting, self.offsets
        for blob in ids:
            first = _U64.unpack_from(blob, 0)[0]
            count = len(blob) >> 3
            run = waiting.get(first)
            if run is not None and count == run.left == len(run.corrs) >> 2 and first in offsets:
                # the usual: a whole run confirmed at once, answered by one call
                del waiting[first]
                self.starts.remove(first)
                out.append(produced_answers(run.corrs, ts, offsets.pop(first)))
                continue
            run = self._run_of(first)
            if run is None:
                continue
            at = first - run.first
            count = min(count, (len(run.corrs) >> 2) - at)
            corrs = run.corrs[4 * at : 4 * (at + count)]
            offset = offsets.pop(first, -1)
            if offset < 0:  # confirmed without being placed: a bug, said as one
                out.append(errors(corrs, ErrorCode.INTERNAL_ERROR))
            else:
                out.append(produced_answers(corrs, ts, offset))
            self._settle(run, at, count)
        if out:
            self.write(b"".join(out))  # a confirm's answers in one write

    def placed(self, publisher_id: int, first_id: int, offset: int) -> None:
        self.offsets[first_id] = offset

    def rejected(self, publisher_id: int, ids: list[int], why: Refusal) -> None:
        out: list[bytes] = []
        for pid in ids:
            run = self._run_of(pid)
            if run is not None:
                self.offsets.pop(pid, None)
                at = pid - run.first
                out.append(errors(run.corrs[4 * at : 4 * at + 4], REFUSAL_CODES[why]))
                self._settle(run, at, 1)
        if out:
            self.write(b"".join(out))

    def stream_gone(self, stream: Stream) -> None:
        self._drop(stream, ErrorCode.TOPIC_NOT_FOUND)

    def stream_moved(self, stream: Stream) -> None:
        self._drop(stream, ErrorCode.NETWORK_ERROR)

    def _drop(self, stream: Stream, code: ErrorCode) -> None:
        """Answer the produces still waiting on ``stream`` with ``code``; forget its publisher."""
        pub = self.publishers.pop(stream, None)
        if pub is not None:
            stream.detach_publisher(pub, confirm_first=False)
        out: list[bytes] = []
        for run in [r for r in self.waiting.values() if r.stream is stream]:
            for k in range(len(run.corrs) >> 2):
                if not run.answered[k]:
                    self.offsets.pop(run.first + k, None)
                    out.append(errors(run.corrs[4 * k : 4 * k + 4], code))
            del self.waiting[run.first]
            self.starts.remove(run.first)
        if out:
            self.write(b"".join(out))

    def _run_of(self, pid: int) -> _Run | None:
        i = bisect_right(self.starts, pid) - 1
        if i < 0:
            return None
        run = self.waiting.get(self.starts[i])
        return run if run is not None and pid < run.first + (len(run.corrs) >> 2) else None

    def _settle(self, run: _Run, at: int, count: int) -> None:
        """Requests ``at``..``at + count - 1`` of ``run`` are answered."""
        run.left -= count
        run.answered[at : at + count] = b"\x01" * count
        if run.left <= 0:
            del self.waiting[run.first]
            self.starts.remove(run.first)


def on_create_topic(conn: MegaConnection, request: Request) -> None:
    name = conn.stream_named(request.topic)
    if name is None:
        conn.answer_error(request.correlation, ErrorCode.INVALID_REQUEST)
        return
    if conn.streams.get(name) is not None:
        conn.answer_error(request.correlation, ErrorCode.TOPIC_ALREADY_EXISTS)
        return
    settings = parse_create_arguments({}, conn.broker.config.retention)
    try:
        conn.streams.create(name, settings)
    except LimitReached:  # logged, with why, where it was reached
        conn.answer_error(request.correlation, ErrorCode.RESOURCE_EXHAUSTED)
        return
    except OSError as e:
        log.error("create %r failed: %s", name, e)
        conn.answer_error(request.correlation, ErrorCode.INTERNAL_ERROR)
        return
    conn.answer(request.correlation, now_ms())


def on_produce(conn: MegaConnection, topic: bytes, corrs: bytes, entries: bytes) -> None:
    """A run of PRODUCEs to ``topic`` (``corrs`` their correlation ids, ``entries`` their
    payloads as simple entries): one PublishBatch, answered once the core confirms it."""
    stream = conn.stream_of(topic)
    if isinstance(stream, ErrorCode):
        conn.write(errors(corrs, stream))
        return
    try:
        elsewhere = conn.broker.members.leader_of(stream) is not None
    except Refused:
        elsewhere = True
    if elsewhere or stream.sealed:  # only a stream's leader appends; the client goes there
        conn.write(errors(corrs, ErrorCode.NETWORK_ERROR))
        return
    pub = conn.publishers.get(stream)
    if pub is None:
        conn.next_publisher += 1
        pub = conn.publishers[stream] = Publisher(conn.next_publisher, None, stream, conn,
                                                  wants_offsets=True)
        stream.attach_publisher(pub)
    n = len(corrs) >> 2
    first = conn.next_id + 1
    conn.next_id += n
    # Each offset comes with PublisherSession.placed once written, the answers with the confirm.
    # Registered first: a refusal answers it during publish.
    conn.waiting[first] = _Run(stream, first, corrs, n)
    conn.starts.append(first)
    try:
        stream.publish(pub, PublishBatch(pub.id, n, consecutive_ids(first, n), entries, n,
                                         first, first + n - 1, True, simple=True))
    except Exception:  # answered 7 by the caller: not again at a confirm
        if conn.waiting.pop(first, None) is not None:
            conn.starts.remove(first)
        raise


def on_consume(conn: MegaConnection, topic: bytes, corrs: bytes, first: int) -> None:
    """A run of CONSUMEs of ``topic`` for offsets ``first``, ``first + 1``, ...: answered in
    order, in one write, the chunks they are in read once each."""
    stream = conn.stream_of(topic)
    if isinstance(stream, ErrorCode):
        conn.write(errors(corrs, stream))
        return
    n = len(corrs) >> 2
    out: list[bytes] = []
    i = 0
    while i < n:
        offset = first + i
        c = corrs[4 * i : 4 * i + 4]
        end = stream.commit_end
        if offset < stream.log.first_offset or offset >= end:
            out.append(errors(c, ErrorCode.INVALID_OFFSET))
            i += 1
            continue
        read = conn.last_read
        if read is None or read.stream is not stream or not read.first <= offset < read.end:
            read = conn.last_read = _read_chunk(stream, offset)
        if read is None:
            out.append(errors(c, ErrorCode.INVALID_OFFSET))  # removed meanwhile
            i += 1
            continue
        at = offset - read.first
        if at >= read.count:
            log.error("stream %s: offset %d unreadable: its chunk holds %d records", stream.name,
                      offset, read.count)
            out.append(errors(c, ErrorCode.INTERNAL_ERROR))
            i += 1
            continue
        k = min(n - i, read.count - at, end - offset)
        out.append(consumed_answers(corrs[4 * i : 4 * (i + k)], read.timestamp, read.entries,
                                    read.positions, at))
        i += k
    conn.write_all(out)


class _ReadChunk:
    """A committed chunk's records (committed chunks never change: safe to keep): ``entries``
    holds each behind its length (a CONSUME answer's payload), ``positions`` where each starts
    and the end, native int64s."""

    __slots__ = ("count", "end", "entries", "first", "positions", "stream", "timestamp")

    def __init__(self, stream: Stream, first: int, end: int, timestamp: int,
                 entries: bytes | memoryview, positions: bytes) -> None:
        self.stream, self.first, self.end = stream, first, end
        self.timestamp, self.entries, self.positions = timestamp, entries, positions
        self.count = len(positions) // 8 - 1


def _read_chunk(stream: Stream, offset: int) -> _ReadChunk | None:
    """The chunk holding ``offset``; None when it is gone; records cut short when unreadable."""
    for ref, chunk in stream.fetch(offset, 1):
        if not ref.chunk_id <= offset < ref.next_offset:
            continue
        data = chunk[HEADER_SIZE : HEADER_SIZE + ref.data_length]
        positions = simple_positions(data)
        if positions is not None:  # simple entries: each a CONSUME answer's payload as stored
            return _ReadChunk(stream, ref.chunk_id, ref.next_offset, ref.timestamp, data,
                              positions)
        records: list[bytes | memoryview] = []  # sub-entry batches: records cut out
        try:
            records.extend(iter_records(data))
        except ChunkError as e:
            log.error("stream %s: chunk %d unreadable: %r", stream.name, ref.chunk_id, e)
        at, pos = array("q", [0]), 0
        parts: list[bytes | memoryview] = []
        for record in records:
            parts += (_U32.pack(len(record)), record)
            pos += 4 + len(record)
            at.append(pos)
        return _ReadChunk(stream, ref.chunk_id, ref.next_offset, ref.timestamp,
                          b"".join(parts), at.tobytes())
    return None


def on_request(conn: MegaConnection, request: Request) -> None:
    """A PRODUCE or CONSUME the run cutters did not take (never, for a request the splitter
    measured): answered as malformed."""
    conn.answer_error(request.correlation, ErrorCode.INVALID_REQUEST)


HANDLERS: dict[MessageType, Callable[[MegaConnection, Request], None]] = {
    MessageType.CREATE_TOPIC: on_create_topic,
    MessageType.PRODUCE: on_request,
    MessageType.CONSUME: on_request,
}
