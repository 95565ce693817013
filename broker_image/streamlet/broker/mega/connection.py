"""One MEGA connection (docs/protocols/mega.md): requests cut by streamlet.mega's splitter, each
answered under its correlation id. Topics are the streams of virtual host "/".

CREATE_TOPIC creates the stream with the broker's default retention; PRODUCE stores the payload
as one simple entry through a core Publisher and answers with its offset once the core confirms
it; CONSUME answers the committed record at an offset. A malformed request is answered with its
error code, one whose end cannot be found with its code and a close; nothing disturbs another
connection or stored data. No authentication, every right on "/"; idle only while no PRODUCE
waits for its confirm.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...core.batch import PublishBatch
from ...core.ports import Refusal
from ...core.registry import LimitReached, Streams
from ...core.streams import Publisher, Stream
from ...mega import ErrorCode, FramingLost, MegaSplitter, MessageType, Request, decode_request
from ...mega.codec import consumed, encode_error, encode_success, produced
from ...storage.chunk import HEADER_SIZE, ChunkError, iter_records
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

#: The core's reasons for refusing a publish, as MEGA codes.
REFUSAL_CODES = {Refusal.GONE: ErrorCode.TOPIC_NOT_FOUND, Refusal.MOVED: ErrorCode.NETWORK_ERROR,
                 Refusal.WRITE_FAILED: ErrorCode.INTERNAL_ERROR}


def now_ms() -> int:
    return int(time.time() * 1000)


class MegaConnection(FramedConnection):
    def __init__(self, broker: Broker, tls: bool = False) -> None:
        settings = broker.config.settings_of("mega", MegaSettings)
        super().__init__(broker, tls, MegaSplitter(settings.max_topic_bytes,
                                                  settings.max_payload_bytes))
        vhost = broker.vhosts["/"]
        self.streams: Streams = vhost.streams
        #: one core Publisher per stream this connection produced to
        self.publishers: dict[Stream, Publisher] = {}
        self.next_publisher = 0
        self.next_id = 0  # publishing ids, one per PRODUCE, over all its publishers
        #: the chunk the last CONSUME read, its records cut out once: a consumer asks for
        #: consecutive offsets, and re-reading and re-walking the chunk for each cost O(chunk)
        self.last_read: _ReadChunk | None = None
        #: produces waiting for their confirm: publishing id -> (correlation, offset, stream)
        self.waiting: dict[int, tuple[int, int, Stream]] = {}

    # --- the transport's hooks ---------------------------------------------------------------

    def accepted(self) -> None:
        self.opened = True  # no handshake: the frame deadline applies from the first byte

    def busy(self) -> bool:
        return bool(self.waiting)  # produces not answered yet

    def handle_frame(self, frame: memoryview) -> None:
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

    # --- answers -------------------------------------------------------------------------------

    def answer(self, correlation: int, timestamp: int, payload: bytes = b"") -> None:
        self.write(encode_success(correlation, timestamp, payload))

    def answer_error(self, correlation: int, code: ErrorCode) -> None:
        self.write(encode_error(correlation, code))

    def stream_named(self, request: Request) -> str | None:
        """The stream a topic names, or None (answered INVALID_REQUEST) if it cannot name one."""
        try:
            name = request.topic.decode()
        except UnicodeDecodeError:
            name = None
        if name is None or valid_stream_name(name) is not None:
            self.answer_error(request.correlation, ErrorCode.INVALID_REQUEST)
            return None
        return name

    def topic(self, request: Request) -> Stream | None:
        """The stream the request's topic names, or None when answered INVALID_REQUEST (not a
        stream name) or TOPIC_NOT_FOUND."""
        name = self.stream_named(request)
        if name is None:
            return None
        stream = self.streams.get(name)
        if stream is None:
            self.answer_error(request.correlation, ErrorCode.TOPIC_NOT_FOUND)
        return stream

    # --- the core's session roles (streamlet.core.ports): PublisherSession, Watcher --------------
    # (MEGA reads by pull (fetch): no subscription, no ReaderSession)

    def confirmed(self, publisher_id: int, ids: list[bytes]) -> None:
        raw = b"".join(ids)
        ts = now_ms()
        for (pid,) in _U64.iter_unpack(raw):
            got = self.waiting.pop(pid, None)
            if got is None:
                continue
            if got[1] < 0:  # confirmed without being placed: a bug, said as one
                self.answer_error(got[0], ErrorCode.INTERNAL_ERROR)
            else:
                self.answer(got[0], ts, produced(got[1]))

    def placed(self, publisher_id: int, first_id: int, offset: int) -> None:
        got = self.waiting.get(first_id)
        if got is not None:
            self.waiting[first_id] = (got[0], offset, got[2])

    def rejected(self, publisher_id: int, ids: list[int], why: Refusal) -> None:
        for pid in ids:
            got = self.waiting.pop(pid, None)
            if got is not None:
                self.answer_error(got[0], REFUSAL_CODES[why])

    def stream_gone(self, stream: Stream) -> None:
        self._drop(stream, ErrorCode.TOPIC_NOT_FOUND)

    def stream_moved(self, stream: Stream) -> None:
        self._drop(stream, ErrorCode.NETWORK_ERROR)

    def _drop(self, stream: Stream, code: ErrorCode) -> None:
        """Answer the produces still waiting on ``stream`` with ``code``; forget its publisher."""
        pub = self.publishers.pop(stream, None)
        if pub is not None:
            stream.detach_publisher(pub, confirm_first=False)
        for pid, (corr, _, s) in list(self.waiting.items()):
            if s is stream:
                del self.waiting[pid]
                self.answer_error(corr, code)


def on_create_topic(conn: MegaConnection, request: Request) -> None:
    name = conn.stream_named(request)
    if name is None:
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


def on_produce(conn: MegaConnection, request: Request) -> None:
    stream = conn.topic(request)
    if stream is None:
        return
    try:
        elsewhere = conn.broker.members.leader_of(stream) is not None
    except Refused:
        elsewhere = True
    if elsewhere or stream.sealed:  # only a stream's leader appends; the client goes there
        conn.answer_error(request.correlation, ErrorCode.NETWORK_ERROR)
        return
    pub = conn.publishers.get(stream)
    if pub is None:
        conn.next_publisher += 1
        pub = conn.publishers[stream] = Publisher(conn.next_publisher, None, stream, conn,
                                                  wants_offsets=True)
        stream.attach_publisher(pub)
    payload = request.payload
    assert payload is not None
    conn.next_id += 1
    pid = conn.next_id
    batch = PublishBatch(pub.id, 1, _U64.pack(pid), _U32.pack(len(payload)) + payload, 1, pid,
                         pid, True, simple=True)
    # Its offset comes with PublisherSession.placed once written, its answer with the confirm.
    # Registered first: a refusal answers it during publish.
    conn.waiting[pid] = (request.correlation, -1, stream)
    stream.publish(pub, batch)


def on_consume(conn: MegaConnection, request: Request) -> None:
    stream = conn.topic(request)
    if stream is None:
        return
    offset = request.offset
    assert offset is not None
    if offset < stream.log.first_offset or offset >= stream.commit_end:
        conn.answer_error(request.correlation, ErrorCode.INVALID_OFFSET)
        return
    read = conn.last_read
    if read is None or read.stream is not stream or not read.first <= offset < read.end:
        read = conn.last_read = _read_chunk(stream, offset)
    if read is None:
        conn.answer_error(request.correlation, ErrorCode.INVALID_OFFSET)  # removed meanwhile
    elif offset - read.first >= len(read.records):
        log.error("stream %s: offset %d unreadable: its chunk holds %d records", stream.name,
                  offset, len(read.records))
        conn.answer_error(request.correlation, ErrorCode.INTERNAL_ERROR)
    else:
        conn.answer(request.correlation, read.timestamp, consumed(read.records[offset - read.first]))


class _ReadChunk:
    """A committed chunk's records (committed chunks never change: safe to keep)."""

    __slots__ = ("stream", "first", "end", "timestamp", "records")

    def __init__(self, stream: Stream, first: int, end: int, timestamp: int,
                 records: list[bytes | memoryview]) -> None:
        self.stream, self.first, self.end = stream, first, end
        self.timestamp, self.records = timestamp, records


def _read_chunk(stream: Stream, offset: int) -> _ReadChunk | None:
    """The chunk holding ``offset``; None when it is gone; records cut short when unreadable."""
    for ref, chunk in stream.fetch(offset, 1):
        if not ref.chunk_id <= offset < ref.next_offset:
            continue
        records: list[bytes | memoryview] = []
        try:
            records.extend(iter_records(chunk[HEADER_SIZE : HEADER_SIZE + ref.data_length]))
        except ChunkError as e:
            log.error("stream %s: chunk %d unreadable: %r", stream.name, ref.chunk_id, e)
        return _ReadChunk(stream, ref.chunk_id, ref.next_offset, ref.timestamp, records)
    return None


HANDLERS: dict[MessageType, Callable[[MegaConnection, Request], None]] = {
    MessageType.CREATE_TOPIC: on_create_topic,
    MessageType.PRODUCE: on_produce,
    MessageType.CONSUME: on_consume,
}
