"""Every command of the protocol as a typed value, with its encoder and decoder.

A frame on the wire is ``Size u32 | Key u16 | Version u16 | body``; responses set the top bit
of the key. :func:`encode` turns a command into a whole frame (size included); :func:`decode`
turns one frame (without its size) into a command, or into a :class:`FrameError` carrying the
protocol's response code: a malformed frame never raises out of here.

Publish and Deliver have fast paths for the broker's hot loop in :mod:`.publish` and
:mod:`.chunk`; the classes here are the general, readable form used by clients and tests.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from . import wire
from .constants import RESPONSE_FLAG, Code, Key
from .wire import Malformed, Reader

_HEADER = struct.Struct(">IHH")


@dataclass(slots=True)
class Command:
    """Base of every command. ``version`` is the frame's version field."""

    KEY: ClassVar[int] = 0
    RESPONSE: ClassVar[bool] = False

    def body(self) -> bytes:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    @classmethod
    def read(cls, r: Reader, version: int) -> Command:  # pragma: no cover
        raise NotImplementedError

    @property
    def wire_key(self) -> int:
        return self.KEY | (RESPONSE_FLAG if self.RESPONSE else 0)


@dataclass(slots=True)
class FrameError:
    """A frame that could not be decoded, and the response code it deserves."""

    key: int
    version: int
    correlation_id: int | None
    code: Code
    reason: str


REGISTRY: dict[int, type[Command]] = {}


def _register(cls: type[Command]) -> type[Command]:
    REGISTRY[cls.KEY | (RESPONSE_FLAG if cls.RESPONSE else 0)] = cls
    return cls


def encode(cmd: Command, version: int | None = None) -> bytes:
    """The whole frame for ``cmd``, size prefix included."""
    body = cmd.body()
    v = version if version is not None else getattr(cmd, "version", 1)
    return _HEADER.pack(len(body) + 4, cmd.wire_key, v) + body


#: Commands whose requests carry no correlation id.
_NO_CORRELATION = {
    Key.PUBLISH, Key.PUBLISH_CONFIRM, Key.PUBLISH_ERROR, Key.DELIVER, Key.CREDIT,
    Key.STORE_OFFSET, Key.METADATA_UPDATE, Key.TUNE, Key.HEARTBEAT,
}


def decode(frame: bytes | memoryview) -> Command | FrameError:
    """Decode one frame (the bytes after its size prefix)."""
    if len(frame) < 4:
        return FrameError(0, 0, None, Code.UNKNOWN_FRAME, "frame shorter than its header")
    key, version = struct.unpack_from(">HH", frame, 0)
    cls = REGISTRY.get(key)
    if cls is None and key == Key.TUNE | RESPONSE_FLAG:
        cls = Tune  # some clients echo Tune as a response
    corr = None
    if (key & 0x7FFF) not in _NO_CORRELATION and len(frame) >= 8:
        corr = struct.unpack_from(">I", frame, 4)[0]
    if cls is None:
        return FrameError(key, version, corr, Code.UNKNOWN_FRAME, f"unknown command key {key:#06x}")
    r = Reader(frame, 4)
    try:
        cmd = cls.read(r, version)
    except Malformed as e:
        return FrameError(key, version, corr, Code.UNKNOWN_FRAME, f"malformed {cls.__name__}: {e}")
    if r.remaining():
        return FrameError(
            key, version, corr, Code.UNKNOWN_FRAME,
            f"{r.remaining()} unexpected bytes after {cls.__name__}",
        )
    return cmd


# ---------------------------------------------------------------------------------------------
# Generic shapes

@dataclass(slots=True)
class SimpleResponse(Command):
    """A response that carries only a correlation id and a code."""

    RESPONSE: ClassVar[bool] = True
    correlation_id: int = 0
    code: int = Code.OK

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code)

    @classmethod
    def read(cls, r: Reader, version: int) -> SimpleResponse:
        return cls(r.u32(), r.u16())


def _simple_response(key: Key, name: str) -> type[SimpleResponse]:
    cls = type(name, (SimpleResponse,), {"KEY": key, "__slots__": ()})
    _register(cls)
    return cls


# ---------------------------------------------------------------------------------------------
# Publishing

@_register
@dataclass(slots=True)
class DeclarePublisher(Command):
    KEY: ClassVar[int] = Key.DECLARE_PUBLISHER
    correlation_id: int
    publisher_id: int
    reference: str | None
    stream: str

    def body(self) -> bytes:
        return (wire.u32(self.correlation_id) + wire.u8(self.publisher_id)
                + wire.string(self.reference) + wire.string(self.stream))

    @classmethod
    def read(cls, r: Reader, version: int) -> DeclarePublisher:
        return cls(r.u32(), r.u8(), r.string(), r.str_())


DeclarePublisherResponse = _simple_response(Key.DECLARE_PUBLISHER, "DeclarePublisherResponse")


@dataclass(slots=True)
class PublishedMessage:
    publishing_id: int
    #: The entry as stored: ``0:1 length:31`` + body, or a sub-entry batch header + body.
    entry: bytes
    filter_value: str | None = None

    @classmethod
    def simple(cls, publishing_id: int, body: bytes, filter_value: str | None = None) -> PublishedMessage:
        return cls(publishing_id, wire.u32(len(body)) + body, filter_value)


def read_entry(r: Reader) -> bytes:
    """One stored entry: simple (``0:1 len:31``) or a sub-entry batch."""
    first = r.buf[r.pos] if r.pos < r.end else None
    if first is None:
        raise Malformed("truncated entry")
    if first & 0x80 == 0:
        n = r.u32()
        r.pos -= 4
        return r.raw(4 + n)
    start = r.pos
    r.u8()
    r.u16()
    r.u32()
    n = r.u32()
    r.pos = start
    return r.raw(11 + n)


@_register
@dataclass(slots=True)
class Publish(Command):
    """Publish v1 (no filter values) or v2 (a filter value per message)."""

    KEY: ClassVar[int] = Key.PUBLISH
    publisher_id: int
    messages: list[PublishedMessage]
    version: int = field(default=1, kw_only=True)

    def body(self) -> bytes:
        parts = [wire.u8(self.publisher_id), wire.i32(len(self.messages))]
        for m in self.messages:
            parts.append(wire.u64(m.publishing_id))
            if self.version >= 2:
                parts.append(wire.string(m.filter_value))
            parts.append(m.entry)
        return b"".join(parts)

    @classmethod
    def read(cls, r: Reader, version: int) -> Publish:
        pid = r.u8()
        n = r.i32()
        if n < 0 or n > r.remaining():
            raise Malformed(f"bad message count {n}")
        msgs = []
        for _ in range(n):
            publishing_id = r.u64()
            fv = r.string() if version >= 2 else None
            msgs.append(PublishedMessage(publishing_id, read_entry(r), fv))
        return cls(pid, msgs, version=version)


@_register
@dataclass(slots=True)
class PublishConfirm(Command):
    KEY: ClassVar[int] = Key.PUBLISH_CONFIRM
    publisher_id: int
    publishing_ids: list[int]

    def body(self) -> bytes:
        n = len(self.publishing_ids)
        return wire.u8(self.publisher_id) + struct.pack(f">i{n}Q", n, *self.publishing_ids)

    @classmethod
    def read(cls, r: Reader, version: int) -> PublishConfirm:
        return cls(r.u8(), r.array(Reader.u64))


@_register
@dataclass(slots=True)
class PublishError(Command):
    KEY: ClassVar[int] = Key.PUBLISH_ERROR
    publisher_id: int
    errors: list[tuple[int, int]]  # (publishing id, code)

    def body(self) -> bytes:
        return wire.u8(self.publisher_id) + wire.array(
            self.errors, lambda e: wire.u64(e[0]) + wire.u16(e[1]))

    @classmethod
    def read(cls, r: Reader, version: int) -> PublishError:
        return cls(r.u8(), r.array(lambda r: (r.u64(), r.u16())))


@_register
@dataclass(slots=True)
class QueryPublisherSequence(Command):
    KEY: ClassVar[int] = Key.QUERY_PUBLISHER_SEQUENCE
    correlation_id: int
    reference: str
    stream: str

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.reference) + wire.string(self.stream)

    @classmethod
    def read(cls, r: Reader, version: int) -> QueryPublisherSequence:
        return cls(r.u32(), r.str_(), r.str_())


@_register
@dataclass(slots=True)
class QueryPublisherSequenceResponse(Command):
    KEY: ClassVar[int] = Key.QUERY_PUBLISHER_SEQUENCE
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    sequence: int

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code) + wire.u64(self.sequence)

    @classmethod
    def read(cls, r: Reader, version: int) -> QueryPublisherSequenceResponse:
        return cls(r.u32(), r.u16(), r.u64())


@_register
@dataclass(slots=True)
class DeletePublisher(Command):
    KEY: ClassVar[int] = Key.DELETE_PUBLISHER
    correlation_id: int
    publisher_id: int

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u8(self.publisher_id)

    @classmethod
    def read(cls, r: Reader, version: int) -> DeletePublisher:
        return cls(r.u32(), r.u8())


DeletePublisherResponse = _simple_response(Key.DELETE_PUBLISHER, "DeletePublisherResponse")


# ---------------------------------------------------------------------------------------------
# Consuming

@_register
@dataclass(slots=True)
class Subscribe(Command):
    KEY: ClassVar[int] = Key.SUBSCRIBE
    correlation_id: int
    subscription_id: int
    stream: str
    offset_type: int
    offset: int  # u64 for OFFSET, i64 ms for TIMESTAMP, 0 otherwise
    credit: int
    properties: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        spec = wire.u16(self.offset_type)
        if self.offset_type == 4:
            spec += wire.u64(self.offset)
        elif self.offset_type == 5:
            spec += wire.i64(self.offset)
        return (wire.u32(self.correlation_id) + wire.u8(self.subscription_id)
                + wire.string(self.stream) + spec + wire.u16(self.credit)
                + wire.properties(self.properties))

    @classmethod
    def read(cls, r: Reader, version: int) -> Subscribe:
        corr, sub, stream, otype = r.u32(), r.u8(), r.str_(), r.u16()
        offset = r.u64() if otype == 4 else r.i64() if otype == 5 else 0
        credit = r.u16()
        props = r.properties() if r.remaining() else {}
        return cls(corr, sub, stream, otype, offset, credit, props)


SubscribeResponse = _simple_response(Key.SUBSCRIBE, "SubscribeResponse")


@_register
@dataclass(slots=True)
class Deliver(Command):
    """A chunk for a subscription: the stored 48-byte header and the entries, as stored."""

    KEY: ClassVar[int] = Key.DELIVER
    subscription_id: int
    chunk: bytes
    committed_chunk_id: int | None = None  # v2 only
    version: int = field(default=1, kw_only=True)

    def body(self) -> bytes:
        if self.version >= 2:
            return wire.u8(self.subscription_id) + wire.u64(self.committed_chunk_id or 0) + self.chunk
        return wire.u8(self.subscription_id) + self.chunk

    @classmethod
    def read(cls, r: Reader, version: int) -> Deliver:
        sub = r.u8()
        committed = r.u64() if version >= 2 else None
        return cls(sub, r.rest(), committed, version=version)


@_register
@dataclass(slots=True)
class Credit(Command):
    KEY: ClassVar[int] = Key.CREDIT
    subscription_id: int
    credit: int

    def body(self) -> bytes:
        return wire.u8(self.subscription_id) + wire.u16(self.credit)

    @classmethod
    def read(cls, r: Reader, version: int) -> Credit:
        return cls(r.u8(), r.u16())


@_register
@dataclass(slots=True)
class CreditResponse(Command):
    """Sent only on error; note it has no correlation id."""

    KEY: ClassVar[int] = Key.CREDIT
    RESPONSE: ClassVar[bool] = True
    code: int
    subscription_id: int

    def body(self) -> bytes:
        return wire.u16(self.code) + wire.u8(self.subscription_id)

    @classmethod
    def read(cls, r: Reader, version: int) -> CreditResponse:
        return cls(r.u16(), r.u8())


@_register
@dataclass(slots=True)
class StoreOffset(Command):
    KEY: ClassVar[int] = Key.STORE_OFFSET
    reference: str
    stream: str
    offset: int

    def body(self) -> bytes:
        return wire.string(self.reference) + wire.string(self.stream) + wire.u64(self.offset)

    @classmethod
    def read(cls, r: Reader, version: int) -> StoreOffset:
        return cls(r.str_(), r.str_(), r.u64())


@_register
@dataclass(slots=True)
class QueryOffset(Command):
    KEY: ClassVar[int] = Key.QUERY_OFFSET
    correlation_id: int
    reference: str
    stream: str

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.reference) + wire.string(self.stream)

    @classmethod
    def read(cls, r: Reader, version: int) -> QueryOffset:
        return cls(r.u32(), r.str_(), r.str_())


@_register
@dataclass(slots=True)
class QueryOffsetResponse(Command):
    KEY: ClassVar[int] = Key.QUERY_OFFSET
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    offset: int

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code) + wire.u64(self.offset)

    @classmethod
    def read(cls, r: Reader, version: int) -> QueryOffsetResponse:
        return cls(r.u32(), r.u16(), r.u64())


@_register
@dataclass(slots=True)
class Unsubscribe(Command):
    KEY: ClassVar[int] = Key.UNSUBSCRIBE
    correlation_id: int
    subscription_id: int

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u8(self.subscription_id)

    @classmethod
    def read(cls, r: Reader, version: int) -> Unsubscribe:
        return cls(r.u32(), r.u8())


UnsubscribeResponse = _simple_response(Key.UNSUBSCRIBE, "UnsubscribeResponse")


@_register
@dataclass(slots=True)
class ConsumerUpdate(Command):
    """Server to client: this subscription became active (1) or passive (0)."""

    KEY: ClassVar[int] = Key.CONSUMER_UPDATE
    correlation_id: int
    subscription_id: int
    active: int

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u8(self.subscription_id) + wire.u8(self.active)

    @classmethod
    def read(cls, r: Reader, version: int) -> ConsumerUpdate:
        return cls(r.u32(), r.u8(), r.u8())


@_register
@dataclass(slots=True)
class ConsumerUpdateResponse(Command):
    """Client to server: where the newly active consumer starts (offset_type 0 = keep)."""

    KEY: ClassVar[int] = Key.CONSUMER_UPDATE
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    offset_type: int
    offset: int

    def body(self) -> bytes:
        off = wire.i64(self.offset) if self.offset_type == 5 else wire.u64(self.offset)
        return wire.u32(self.correlation_id) + wire.u16(self.code) + wire.u16(self.offset_type) + off

    @classmethod
    def read(cls, r: Reader, version: int) -> ConsumerUpdateResponse:
        corr, code, otype = r.u32(), r.u16(), r.u16()
        offset = r.i64() if otype == 5 else r.u64() if r.remaining() else 0
        return cls(corr, code, otype, offset)


# ---------------------------------------------------------------------------------------------
# Streams

@_register
@dataclass(slots=True)
class Create(Command):
    KEY: ClassVar[int] = Key.CREATE
    correlation_id: int
    stream: str
    arguments: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.stream) + wire.properties(self.arguments)

    @classmethod
    def read(cls, r: Reader, version: int) -> Create:
        return cls(r.u32(), r.str_(), r.properties())


CreateResponse = _simple_response(Key.CREATE, "CreateResponse")


@_register
@dataclass(slots=True)
class Delete(Command):
    KEY: ClassVar[int] = Key.DELETE
    correlation_id: int
    stream: str

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.stream)

    @classmethod
    def read(cls, r: Reader, version: int) -> Delete:
        return cls(r.u32(), r.str_())


DeleteResponse = _simple_response(Key.DELETE, "DeleteResponse")


@_register
@dataclass(slots=True)
class Metadata(Command):
    KEY: ClassVar[int] = Key.METADATA
    correlation_id: int
    streams: list[str]

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.array(self.streams, wire.string)

    @classmethod
    def read(cls, r: Reader, version: int) -> Metadata:
        return cls(r.u32(), r.array(Reader.str_))


@dataclass(slots=True)
class BrokerInfo:
    reference: int
    host: str
    port: int


@dataclass(slots=True)
class StreamMetadata:
    stream: str
    code: int
    leader: int
    replicas: list[int] = field(default_factory=list)


@_register
@dataclass(slots=True)
class MetadataResponse(Command):
    """Note: no top-level response code; each stream carries its own."""

    KEY: ClassVar[int] = Key.METADATA
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    brokers: list[BrokerInfo]
    streams: list[StreamMetadata]

    def body(self) -> bytes:
        return (
            wire.u32(self.correlation_id)
            + wire.array(self.brokers, lambda b: wire.u16(b.reference) + wire.string(b.host) + wire.u32(b.port))
            + wire.array(self.streams, lambda s: wire.string(s.stream) + wire.u16(s.code)
                         + wire.u16(s.leader) + wire.array(s.replicas, wire.u16))
        )

    @classmethod
    def read(cls, r: Reader, version: int) -> MetadataResponse:
        corr = r.u32()
        brokers = r.array(lambda r: BrokerInfo(r.u16(), r.str_(), r.u32()))
        streams = r.array(lambda r: StreamMetadata(r.str_(), r.u16(), r.u16(), r.array(Reader.u16)))
        return cls(corr, brokers, streams)


@_register
@dataclass(slots=True)
class MetadataUpdate(Command):
    KEY: ClassVar[int] = Key.METADATA_UPDATE
    code: int
    stream: str

    def body(self) -> bytes:
        return wire.u16(self.code) + wire.string(self.stream)

    @classmethod
    def read(cls, r: Reader, version: int) -> MetadataUpdate:
        return cls(r.u16(), r.str_())


@_register
@dataclass(slots=True)
class StreamStats(Command):
    KEY: ClassVar[int] = Key.STREAM_STATS
    correlation_id: int
    stream: str

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.stream)

    @classmethod
    def read(cls, r: Reader, version: int) -> StreamStats:
        return cls(r.u32(), r.str_())


@_register
@dataclass(slots=True)
class StreamStatsResponse(Command):
    KEY: ClassVar[int] = Key.STREAM_STATS
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    stats: dict[str, int] = field(default_factory=dict)

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code) + wire.array(
            list(self.stats.items()), lambda kv: wire.string(kv[0]) + wire.i64(kv[1]))

    @classmethod
    def read(cls, r: Reader, version: int) -> StreamStatsResponse:
        corr, code = r.u32(), r.u16()
        stats = dict(r.array(lambda r: (r.str_(), r.i64()))) if r.remaining() else {}
        return cls(corr, code, stats)


@_register
@dataclass(slots=True)
class ResolveOffsetSpec(Command):
    KEY: ClassVar[int] = Key.RESOLVE_OFFSET_SPEC
    correlation_id: int
    stream: str
    offset_type: int
    offset: int
    properties: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        off = wire.i64(self.offset) if self.offset_type == 5 else wire.u64(self.offset)
        return (wire.u32(self.correlation_id) + wire.string(self.stream) + wire.u16(self.offset_type)
                + off + wire.properties(self.properties))

    @classmethod
    def read(cls, r: Reader, version: int) -> ResolveOffsetSpec:
        corr, stream, otype = r.u32(), r.str_(), r.u16()
        offset = r.i64() if otype == 5 else r.u64()
        return cls(corr, stream, otype, offset, r.properties() if r.remaining() else {})


@_register
@dataclass(slots=True)
class ResolveOffsetSpecResponse(Command):
    KEY: ClassVar[int] = Key.RESOLVE_OFFSET_SPEC
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    offset_type: int = 4
    offset: int = 0

    def body(self) -> bytes:
        return (wire.u32(self.correlation_id) + wire.u16(self.code) + wire.u16(self.offset_type)
                + wire.u64(self.offset))

    @classmethod
    def read(cls, r: Reader, version: int) -> ResolveOffsetSpecResponse:
        corr, code = r.u32(), r.u16()
        if not r.remaining():
            return cls(corr, code)
        return cls(corr, code, r.u16(), r.u64())


# ---------------------------------------------------------------------------------------------
# Super streams

@_register
@dataclass(slots=True)
class Route(Command):
    KEY: ClassVar[int] = Key.ROUTE
    correlation_id: int
    routing_key: str
    super_stream: str

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.routing_key) + wire.string(self.super_stream)

    @classmethod
    def read(cls, r: Reader, version: int) -> Route:
        return cls(r.u32(), r.str_(), r.str_())


@dataclass(slots=True)
class _StreamsResponse(Command):
    RESPONSE: ClassVar[bool] = True
    correlation_id: int = 0
    code: int = Code.OK
    streams: list[str] = field(default_factory=list)

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code) + wire.array(self.streams, wire.string)

    @classmethod
    def read(cls, r: Reader, version: int) -> _StreamsResponse:
        corr, code = r.u32(), r.u16()
        return cls(corr, code, r.array(Reader.str_) if r.remaining() else [])


@_register
@dataclass(slots=True)
class RouteResponse(_StreamsResponse):
    KEY: ClassVar[int] = Key.ROUTE


@_register
@dataclass(slots=True)
class Partitions(Command):
    KEY: ClassVar[int] = Key.PARTITIONS
    correlation_id: int
    super_stream: str

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.super_stream)

    @classmethod
    def read(cls, r: Reader, version: int) -> Partitions:
        return cls(r.u32(), r.str_())


@_register
@dataclass(slots=True)
class PartitionsResponse(_StreamsResponse):
    KEY: ClassVar[int] = Key.PARTITIONS


@_register
@dataclass(slots=True)
class CreateSuperStream(Command):
    KEY: ClassVar[int] = Key.CREATE_SUPER_STREAM
    correlation_id: int
    name: str
    partitions: list[str]
    binding_keys: list[str]
    arguments: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        return (wire.u32(self.correlation_id) + wire.string(self.name)
                + wire.array(self.partitions, wire.string) + wire.array(self.binding_keys, wire.string)
                + wire.properties(self.arguments))

    @classmethod
    def read(cls, r: Reader, version: int) -> CreateSuperStream:
        return cls(r.u32(), r.str_(), r.array(Reader.str_), r.array(Reader.str_), r.properties())


CreateSuperStreamResponse = _simple_response(Key.CREATE_SUPER_STREAM, "CreateSuperStreamResponse")


@_register
@dataclass(slots=True)
class DeleteSuperStream(Command):
    KEY: ClassVar[int] = Key.DELETE_SUPER_STREAM
    correlation_id: int
    name: str

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.name)

    @classmethod
    def read(cls, r: Reader, version: int) -> DeleteSuperStream:
        return cls(r.u32(), r.str_())


DeleteSuperStreamResponse = _simple_response(Key.DELETE_SUPER_STREAM, "DeleteSuperStreamResponse")


# ---------------------------------------------------------------------------------------------
# Connection

@_register
@dataclass(slots=True)
class PeerProperties(Command):
    KEY: ClassVar[int] = Key.PEER_PROPERTIES
    correlation_id: int
    properties: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.properties(self.properties)

    @classmethod
    def read(cls, r: Reader, version: int) -> PeerProperties:
        return cls(r.u32(), r.properties())


@_register
@dataclass(slots=True)
class PeerPropertiesResponse(Command):
    KEY: ClassVar[int] = Key.PEER_PROPERTIES
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    properties: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code) + wire.properties(self.properties)

    @classmethod
    def read(cls, r: Reader, version: int) -> PeerPropertiesResponse:
        corr, code = r.u32(), r.u16()
        return cls(corr, code, r.properties() if r.remaining() else {})


@_register
@dataclass(slots=True)
class SaslHandshake(Command):
    KEY: ClassVar[int] = Key.SASL_HANDSHAKE
    correlation_id: int

    def body(self) -> bytes:
        return wire.u32(self.correlation_id)

    @classmethod
    def read(cls, r: Reader, version: int) -> SaslHandshake:
        return cls(r.u32())


@_register
@dataclass(slots=True)
class SaslHandshakeResponse(Command):
    KEY: ClassVar[int] = Key.SASL_HANDSHAKE
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    mechanisms: list[str] = field(default_factory=list)

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code) + wire.array(self.mechanisms, wire.string)

    @classmethod
    def read(cls, r: Reader, version: int) -> SaslHandshakeResponse:
        corr, code = r.u32(), r.u16()
        return cls(corr, code, r.array(Reader.str_) if r.remaining() else [])


@_register
@dataclass(slots=True)
class SaslAuthenticate(Command):
    KEY: ClassVar[int] = Key.SASL_AUTHENTICATE
    correlation_id: int
    mechanism: str
    data: bytes | None

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.mechanism) + wire.bytes_(self.data)

    @classmethod
    def read(cls, r: Reader, version: int) -> SaslAuthenticate:
        return cls(r.u32(), r.str_(), r.bytes_())


@_register
@dataclass(slots=True)
class SaslAuthenticateResponse(Command):
    """The challenge bytes are present only when the server sends one."""

    KEY: ClassVar[int] = Key.SASL_AUTHENTICATE
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    data: bytes | None = None

    def body(self) -> bytes:
        tail = wire.bytes_(self.data) if self.data is not None else b""
        return wire.u32(self.correlation_id) + wire.u16(self.code) + tail

    @classmethod
    def read(cls, r: Reader, version: int) -> SaslAuthenticateResponse:
        corr, code = r.u32(), r.u16()
        return cls(corr, code, r.bytes_() if r.remaining() else None)


@_register
@dataclass(slots=True)
class Tune(Command):
    """Sent by the server first; the client echoes the values it agrees on."""

    KEY: ClassVar[int] = Key.TUNE
    frame_max: int
    heartbeat: int

    def body(self) -> bytes:
        return wire.u32(self.frame_max) + wire.u32(self.heartbeat)

    @classmethod
    def read(cls, r: Reader, version: int) -> Tune:
        return cls(r.u32(), r.u32())


@_register
@dataclass(slots=True)
class Open(Command):
    KEY: ClassVar[int] = Key.OPEN
    correlation_id: int
    virtual_host: str

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.string(self.virtual_host)

    @classmethod
    def read(cls, r: Reader, version: int) -> Open:
        return cls(r.u32(), r.str_())


@_register
@dataclass(slots=True)
class OpenResponse(Command):
    KEY: ClassVar[int] = Key.OPEN
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    properties: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code) + wire.properties(self.properties)

    @classmethod
    def read(cls, r: Reader, version: int) -> OpenResponse:
        corr, code = r.u32(), r.u16()
        return cls(corr, code, r.properties() if r.remaining() else {})


@_register
@dataclass(slots=True)
class Close(Command):
    KEY: ClassVar[int] = Key.CLOSE
    correlation_id: int
    code: int
    reason: str

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code) + wire.string(self.reason)

    @classmethod
    def read(cls, r: Reader, version: int) -> Close:
        return cls(r.u32(), r.u16(), r.str_())


CloseResponse = _simple_response(Key.CLOSE, "CloseResponse")


@_register
@dataclass(slots=True)
class Heartbeat(Command):
    KEY: ClassVar[int] = Key.HEARTBEAT

    def body(self) -> bytes:
        return b""

    @classmethod
    def read(cls, r: Reader, version: int) -> Heartbeat:
        return cls()


@dataclass(slots=True)
class CommandVersion:
    key: int
    min_version: int
    max_version: int


def _read_versions(r: Reader) -> list[CommandVersion]:
    return r.array(lambda r: CommandVersion(r.u16(), r.u16(), r.u16()))


def _write_versions(vs: list[CommandVersion]) -> bytes:
    return wire.array(vs, lambda v: struct.pack(">HHH", v.key, v.min_version, v.max_version))


@_register
@dataclass(slots=True)
class ExchangeCommandVersions(Command):
    KEY: ClassVar[int] = Key.EXCHANGE_COMMAND_VERSIONS
    correlation_id: int
    versions: list[CommandVersion]

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + _write_versions(self.versions)

    @classmethod
    def read(cls, r: Reader, version: int) -> ExchangeCommandVersions:
        return cls(r.u32(), _read_versions(r))


@_register
@dataclass(slots=True)
class ExchangeCommandVersionsResponse(Command):
    KEY: ClassVar[int] = Key.EXCHANGE_COMMAND_VERSIONS
    RESPONSE: ClassVar[bool] = True
    correlation_id: int
    code: int
    versions: list[CommandVersion]

    def body(self) -> bytes:
        return wire.u32(self.correlation_id) + wire.u16(self.code) + _write_versions(self.versions)

    @classmethod
    def read(cls, r: Reader, version: int) -> ExchangeCommandVersionsResponse:
        return cls(r.u32(), r.u16(), _read_versions(r))
