"""Every command of the protocol as a typed value, with its encoder and decoder.

A frame on the wire is ``Size u32 | Key u16 | Version u16 | body``; responses set the top bit
of the key. :func:`encode` turns a command into a whole frame (size included); :func:`decode`
turns one frame (without its size) into a command, or into a :class:`FrameError` carrying the
protocol's response code: a malformed frame never raises out of here.

The replication commands (keys 0x7E01-0x7E0B, 0x7E10-0x7E11, last section) are streamlet's own,
between
its brokers and from the operator: never a client's.

Most commands are declared by their ``LAYOUT``: one wire codec per dataclass field, in order
(rstream's idea of fields that carry their wire types, as a tuple). The few with a layout that
depends on a value (Publish, Deliver, Subscribe, offsets typed by their offset type) write
``body`` and ``read`` by hand. The broker's hot paths (Publish in, Deliver and PublishConfirm
out) have their own fast code in :mod:`.publish`; these classes are the general form.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from . import fields as wire
from .constants import RESPONSE_FLAG, Code, Key
from .fields import Malformed, Reader

_HEADER = struct.Struct(">IHH")


# ---------------------------------------------------------------------------------------------
# Wire codecs: a reader and a writer for one field


@dataclass(frozen=True, slots=True)
class Codec:
    read: Callable[[Reader], Any]
    write: Callable[[Any], bytes]


U8 = Codec(Reader.u8, wire.u8)
U16 = Codec(Reader.u16, wire.u16)
U32 = Codec(Reader.u32, wire.u32)
U64 = Codec(Reader.u64, wire.u64)
I64 = Codec(Reader.i64, wire.i64)
STR = Codec(Reader.str_, wire.string)  # a null string reads as ""
NULLABLE_STR = Codec(Reader.string, wire.string)
BYTES = Codec(Reader.bytes_, wire.bytes_)
PROPERTIES = Codec(Reader.properties, wire.properties)


def _read_u64_array(r: Reader) -> list[int]:
    n = r.i32()
    if n < 0:
        raise Malformed(f"bad array length {n}")
    return list(struct.unpack(f">{n}Q", r.raw(8 * n)))


#: Publishing ids in confirms: thousands per frame, read and written in one struct call
U64_ARRAY = Codec(_read_u64_array, lambda v: struct.pack(f">i{len(v)}Q", len(v), *v))


def array(item: Codec) -> Codec:
    return Codec(lambda r: r.array(item.read), lambda v: wire.array(v, item.write))


def record(cls: type, *layout: Codec) -> Codec:
    """A struct inside a frame, read into ``cls`` (a dataclass or tuple of the same order)."""
    names = [f.name for f in fields(cls)] if cls is not tuple else None

    def read(r: Reader) -> Any:
        values = [c.read(r) for c in layout]
        return tuple(values) if names is None else cls(*values)

    def write(v: Any) -> bytes:
        values = v if names is None else [getattr(v, n) for n in names]
        return b"".join(c.write(x) for c, x in zip(layout, values, strict=True))

    return Codec(read, write)


def mapping(key: Codec, value: Codec) -> Codec:
    pair = record(tuple, key, value)
    return Codec(lambda r: dict(r.array(pair.read)), lambda v: wire.array(list(v.items()), pair.write))


def optional_tail(codec: Codec, default: Callable[[], Any]) -> Codec:
    """A last field some peers omit: read only if bytes remain; always written."""
    return Codec(lambda r: codec.read(r) if r.remaining() else default(), codec.write)


def absent_if_none(codec: Codec) -> Codec:
    """A last field present only when it has a value (SASL challenge data)."""
    return Codec(lambda r: codec.read(r) if r.remaining() else None,
                 lambda v: b"" if v is None else codec.write(v))


# ---------------------------------------------------------------------------------------------
# Commands


@dataclass(slots=True)
class Command:
    """Base of every command: encodes and decodes by ``LAYOUT`` unless a class overrides."""

    KEY: ClassVar[int] = 0
    RESPONSE: ClassVar[bool] = False
    LAYOUT: ClassVar[tuple[Codec, ...]] = ()
    _NAMES: ClassVar[tuple[str, ...]] = ()

    def body(self) -> bytes:
        return b"".join(c.write(getattr(self, n)) for c, n in zip(self.LAYOUT, self._NAMES, strict=True))

    @classmethod
    def read(cls, r: Reader, version: int) -> Command:
        return cls(*[c.read(r) for c in cls.LAYOUT])

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
    cls._NAMES = tuple(f.name for f in fields(cls))
    if cls.LAYOUT and len(cls.LAYOUT) != len(cls._NAMES):
        raise TypeError(f"{cls.__name__}: LAYOUT has {len(cls.LAYOUT)} codecs for {len(cls._NAMES)} fields")
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
    Key.REPLICA_CHUNKS, Key.REPLICA_ACK, Key.REPLICA_COMMIT,
    Key.SAC_LEAVE, Key.SAC_UPDATE, Key.SAC_STEPPED_DOWN,
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


def _offset_codec(offset_type: int) -> Codec:
    """Offsets are u64, but a timestamp (offset type 5) is an i64 of milliseconds."""
    return I64 if offset_type == 5 else U64


@dataclass(slots=True)
class SimpleResponse(Command):
    """A response that carries only a correlation id and a code."""

    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16)
    correlation_id: int = 0
    code: int = Code.OK


def _simple_response(key: Key, name: str) -> type[SimpleResponse]:
    cls = type(name, (SimpleResponse,), {"KEY": key, "__slots__": ()})
    _register(cls)
    return cls


# --- publishing ------------------------------------------------------------------------------

@_register
@dataclass(slots=True)
class DeclarePublisher(Command):
    KEY: ClassVar[int] = Key.DECLARE_PUBLISHER
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8, NULLABLE_STR, STR)
    correlation_id: int
    publisher_id: int
    reference: str | None
    stream: str


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
    """One stored entry: simple (``0:1 len:31``) or a sub-entry batch (11-byte header)."""
    if r.pos >= r.end:
        raise Malformed("truncated entry")
    start = r.pos
    if r.buf[start] & 0x80 == 0:
        n = 4 + r.u32()
    else:
        r.raw(7)
        n = 11 + r.u32()
    r.pos = start
    return r.raw(n)


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
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U8, U64_ARRAY)
    publisher_id: int
    publishing_ids: list[int]


@_register
@dataclass(slots=True)
class PublishError(Command):
    KEY: ClassVar[int] = Key.PUBLISH_ERROR
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U8, array(record(tuple, U64, U16)))
    publisher_id: int
    errors: list[tuple[int, int]]  # (publishing id, code)


@_register
@dataclass(slots=True)
class QueryPublisherSequence(Command):
    KEY: ClassVar[int] = Key.QUERY_PUBLISHER_SEQUENCE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, STR)
    correlation_id: int
    reference: str
    stream: str


@_register
@dataclass(slots=True)
class QueryPublisherSequenceResponse(Command):
    KEY: ClassVar[int] = Key.QUERY_PUBLISHER_SEQUENCE
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64)
    correlation_id: int
    code: int
    sequence: int


@_register
@dataclass(slots=True)
class DeletePublisher(Command):
    KEY: ClassVar[int] = Key.DELETE_PUBLISHER
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8)
    correlation_id: int
    publisher_id: int


DeletePublisherResponse = _simple_response(Key.DELETE_PUBLISHER, "DeletePublisherResponse")


# --- consuming -------------------------------------------------------------------------------

@_register
@dataclass(slots=True)
class Subscribe(Command):
    KEY: ClassVar[int] = Key.SUBSCRIBE
    correlation_id: int
    subscription_id: int
    stream: str
    offset_type: int
    offset: int  # u64 for OFFSET, i64 ms for TIMESTAMP, absent (0) otherwise
    credit: int
    properties: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        offset = _offset_codec(self.offset_type).write(self.offset) if self.offset_type in (4, 5) else b""
        return (wire.u32(self.correlation_id) + wire.u8(self.subscription_id) + wire.string(self.stream)
                + wire.u16(self.offset_type) + offset + wire.u16(self.credit)
                + wire.properties(self.properties))

    @classmethod
    def read(cls, r: Reader, version: int) -> Subscribe:
        corr, sub, stream, otype = r.u32(), r.u8(), r.str_(), r.u16()
        offset = _offset_codec(otype).read(r) if otype in (4, 5) else 0
        credit = r.u16()
        return cls(corr, sub, stream, otype, offset, credit, r.properties() if r.remaining() else {})


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
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U8, U16)
    subscription_id: int
    credit: int


@_register
@dataclass(slots=True)
class CreditResponse(Command):
    """Sent only on error; note it has no correlation id."""

    KEY: ClassVar[int] = Key.CREDIT
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U16, U8)
    code: int
    subscription_id: int


@_register
@dataclass(slots=True)
class StoreOffset(Command):
    KEY: ClassVar[int] = Key.STORE_OFFSET
    LAYOUT: ClassVar[tuple[Codec, ...]] = (STR, STR, U64)
    reference: str
    stream: str
    offset: int


@_register
@dataclass(slots=True)
class QueryOffset(Command):
    KEY: ClassVar[int] = Key.QUERY_OFFSET
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, STR)
    correlation_id: int
    reference: str
    stream: str


@_register
@dataclass(slots=True)
class QueryOffsetResponse(Command):
    KEY: ClassVar[int] = Key.QUERY_OFFSET
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64)
    correlation_id: int
    code: int
    offset: int


@_register
@dataclass(slots=True)
class Unsubscribe(Command):
    KEY: ClassVar[int] = Key.UNSUBSCRIBE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8)
    correlation_id: int
    subscription_id: int


UnsubscribeResponse = _simple_response(Key.UNSUBSCRIBE, "UnsubscribeResponse")


@_register
@dataclass(slots=True)
class ConsumerUpdate(Command):
    """Server to client: this subscription became active (1) or passive (0)."""

    KEY: ClassVar[int] = Key.CONSUMER_UPDATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8, U8)
    correlation_id: int
    subscription_id: int
    active: int


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
        return (wire.u32(self.correlation_id) + wire.u16(self.code) + wire.u16(self.offset_type)
                + _offset_codec(self.offset_type).write(self.offset))

    @classmethod
    def read(cls, r: Reader, version: int) -> ConsumerUpdateResponse:
        corr, code, otype = r.u32(), r.u16(), r.u16()
        offset = _offset_codec(otype).read(r) if r.remaining() else 0
        return cls(corr, code, otype, offset)


# --- streams ---------------------------------------------------------------------------------

@_register
@dataclass(slots=True)
class Create(Command):
    KEY: ClassVar[int] = Key.CREATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, PROPERTIES)
    correlation_id: int
    stream: str
    arguments: dict[str, str] = field(default_factory=dict)


CreateResponse = _simple_response(Key.CREATE, "CreateResponse")


@_register
@dataclass(slots=True)
class Delete(Command):
    KEY: ClassVar[int] = Key.DELETE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    stream: str


DeleteResponse = _simple_response(Key.DELETE, "DeleteResponse")


@_register
@dataclass(slots=True)
class Metadata(Command):
    KEY: ClassVar[int] = Key.METADATA
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, array(STR))
    correlation_id: int
    streams: list[str]


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
    LAYOUT: ClassVar[tuple[Codec, ...]] = (
        U32,
        array(record(BrokerInfo, U16, STR, U32)),
        array(record(StreamMetadata, STR, U16, U16, array(U16))),
    )
    correlation_id: int
    brokers: list[BrokerInfo]
    streams: list[StreamMetadata]


@_register
@dataclass(slots=True)
class MetadataUpdate(Command):
    KEY: ClassVar[int] = Key.METADATA_UPDATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U16, STR)
    code: int
    stream: str


@_register
@dataclass(slots=True)
class StreamStats(Command):
    KEY: ClassVar[int] = Key.STREAM_STATS
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    stream: str


@_register
@dataclass(slots=True)
class StreamStatsResponse(Command):
    KEY: ClassVar[int] = Key.STREAM_STATS
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, optional_tail(mapping(STR, I64), dict))
    correlation_id: int
    code: int
    stats: dict[str, int] = field(default_factory=dict)


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
        return (wire.u32(self.correlation_id) + wire.string(self.stream) + wire.u16(self.offset_type)
                + _offset_codec(self.offset_type).write(self.offset) + wire.properties(self.properties))

    @classmethod
    def read(cls, r: Reader, version: int) -> ResolveOffsetSpec:
        corr, stream, otype = r.u32(), r.str_(), r.u16()
        offset = _offset_codec(otype).read(r)
        return cls(corr, stream, otype, offset, r.properties() if r.remaining() else {})


@_register
@dataclass(slots=True)
class ResolveOffsetSpecResponse(Command):
    """On error only the code; on success the offset type (always 4) and the offset."""

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


# --- super streams ---------------------------------------------------------------------------

@_register
@dataclass(slots=True)
class Route(Command):
    KEY: ClassVar[int] = Key.ROUTE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, STR)
    correlation_id: int
    routing_key: str
    super_stream: str


@dataclass(slots=True)
class _StreamsResponse(Command):
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, optional_tail(array(STR), list))
    correlation_id: int = 0
    code: int = Code.OK
    streams: list[str] = field(default_factory=list)


@_register
@dataclass(slots=True)
class RouteResponse(_StreamsResponse):
    KEY: ClassVar[int] = Key.ROUTE


@_register
@dataclass(slots=True)
class Partitions(Command):
    KEY: ClassVar[int] = Key.PARTITIONS
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    super_stream: str


@_register
@dataclass(slots=True)
class PartitionsResponse(_StreamsResponse):
    KEY: ClassVar[int] = Key.PARTITIONS


@_register
@dataclass(slots=True)
class CreateSuperStream(Command):
    KEY: ClassVar[int] = Key.CREATE_SUPER_STREAM
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, array(STR), array(STR), PROPERTIES)
    correlation_id: int
    name: str
    partitions: list[str]
    binding_keys: list[str]
    arguments: dict[str, str] = field(default_factory=dict)


CreateSuperStreamResponse = _simple_response(Key.CREATE_SUPER_STREAM, "CreateSuperStreamResponse")


@_register
@dataclass(slots=True)
class DeleteSuperStream(Command):
    KEY: ClassVar[int] = Key.DELETE_SUPER_STREAM
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    name: str


DeleteSuperStreamResponse = _simple_response(Key.DELETE_SUPER_STREAM, "DeleteSuperStreamResponse")


# --- connection ------------------------------------------------------------------------------

@_register
@dataclass(slots=True)
class PeerProperties(Command):
    KEY: ClassVar[int] = Key.PEER_PROPERTIES
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, PROPERTIES)
    correlation_id: int
    properties: dict[str, str] = field(default_factory=dict)


@_register
@dataclass(slots=True)
class PeerPropertiesResponse(Command):
    KEY: ClassVar[int] = Key.PEER_PROPERTIES
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, optional_tail(PROPERTIES, dict))
    correlation_id: int
    code: int
    properties: dict[str, str] = field(default_factory=dict)


@_register
@dataclass(slots=True)
class SaslHandshake(Command):
    KEY: ClassVar[int] = Key.SASL_HANDSHAKE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32,)
    correlation_id: int


@_register
@dataclass(slots=True)
class SaslHandshakeResponse(Command):
    KEY: ClassVar[int] = Key.SASL_HANDSHAKE
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, optional_tail(array(STR), list))
    correlation_id: int
    code: int
    mechanisms: list[str] = field(default_factory=list)


@_register
@dataclass(slots=True)
class SaslAuthenticate(Command):
    KEY: ClassVar[int] = Key.SASL_AUTHENTICATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, BYTES)
    correlation_id: int
    mechanism: str
    data: bytes | None


@_register
@dataclass(slots=True)
class SaslAuthenticateResponse(Command):
    """The challenge bytes are present only when the server sends one."""

    KEY: ClassVar[int] = Key.SASL_AUTHENTICATE
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, absent_if_none(BYTES))
    correlation_id: int
    code: int
    data: bytes | None = None


@_register
@dataclass(slots=True)
class Tune(Command):
    """Sent by the server first; the client echoes the values it agrees on."""

    KEY: ClassVar[int] = Key.TUNE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U32)
    frame_max: int
    heartbeat: int


@_register
@dataclass(slots=True)
class Open(Command):
    KEY: ClassVar[int] = Key.OPEN
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    virtual_host: str


@_register
@dataclass(slots=True)
class OpenResponse(Command):
    KEY: ClassVar[int] = Key.OPEN
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, optional_tail(PROPERTIES, dict))
    correlation_id: int
    code: int
    properties: dict[str, str] = field(default_factory=dict)


@_register
@dataclass(slots=True)
class Close(Command):
    KEY: ClassVar[int] = Key.CLOSE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, STR)
    correlation_id: int
    code: int
    reason: str


CloseResponse = _simple_response(Key.CLOSE, "CloseResponse")


@_register
@dataclass(slots=True)
class Heartbeat(Command):
    KEY: ClassVar[int] = Key.HEARTBEAT


@dataclass(slots=True)
class CommandVersion:
    key: int
    min_version: int
    max_version: int


_VERSIONS = array(record(CommandVersion, U16, U16, U16))


@_register
@dataclass(slots=True)
class ExchangeCommandVersions(Command):
    KEY: ClassVar[int] = Key.EXCHANGE_COMMAND_VERSIONS
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, _VERSIONS)
    correlation_id: int
    versions: list[CommandVersion]


@_register
@dataclass(slots=True)
class ExchangeCommandVersionsResponse(Command):
    KEY: ClassVar[int] = Key.EXCHANGE_COMMAND_VERSIONS
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, _VERSIONS)
    correlation_id: int
    code: int
    versions: list[CommandVersion]


# --- replication (streamlet's own: replica <-> leader, operator -> broker) ---------------------
# Epochs are u64 (as in a chunk header), chunk ids i64 (-1: none), offsets u64. A replica opens
# one connection per stream it follows (as Osiris runs one reader per replica): ReplicaHello
# binds it to the stream. A refusal for a fenced member (an epoch older than the peer's) is
# code 6, STREAM_NOT_AVAILABLE, the epoch fields telling which side is behind.

#: An epoch vector: ``(epoch, last chunk id of that epoch)``, oldest first (Osiris's overview)
EPOCH_VECTOR = array(record(tuple, U64, I64))


@_register
@dataclass(slots=True)
class ReplicaHello(Command):
    """Replica to leader: follow ``stream`` in ``epoch``; the replica's tail as it stands."""

    KEY: ClassVar[int] = Key.REPLICA_HELLO
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64, U16, U64, I64, U64)
    correlation_id: int
    stream: str
    epoch: int
    member: int
    tail_epoch: int
    tail_chunk_id: int
    next_offset: int


@_register
@dataclass(slots=True)
class ReplicaHelloResponse(Command):
    """The leader's epoch, its first offset and its epoch vector: what the replica truncates by."""

    KEY: ClassVar[int] = Key.REPLICA_HELLO
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64, U64, EPOCH_VECTOR)
    correlation_id: int
    code: int
    epoch: int = 0
    first_offset: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)


@_register
@dataclass(slots=True)
class ReplicaStart(Command):
    """Replica to leader, once truncated: its tail now; chunks flow from ``next_offset``. The
    leader checks that ``(tail_epoch, tail_chunk_id)`` is in its log (Osiris's
    ``init_data_reader``) and refuses otherwise."""

    KEY: ClassVar[int] = Key.REPLICA_START
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U64, U64, I64, U64)
    correlation_id: int
    epoch: int
    tail_epoch: int
    tail_chunk_id: int
    next_offset: int


ReplicaStartResponse = _simple_response(Key.REPLICA_START, "ReplicaStartResponse")

_CHUNKS_HEAD = struct.Struct(">IHHQq")


@_register
@dataclass(slots=True)
class ReplicaChunks(Command):
    """Leader to replica, no answer: whole chunks as stored (header, bloom, data, trailer),
    back to back, and the leader's commit point. The chunks are the rest of the frame, decoded
    as a view of it (no copy); the leader writes :meth:`prefix` and then the bytes (or
    sendfile), as Deliver's fast path does."""

    KEY: ClassVar[int] = Key.REPLICA_CHUNKS
    epoch: int
    committed_chunk_id: int
    chunks: bytes | memoryview

    def body(self) -> bytes:
        return wire.u64(self.epoch) + wire.i64(self.committed_chunk_id) + bytes(self.chunks)

    @classmethod
    def read(cls, r: Reader, version: int) -> ReplicaChunks:
        epoch, committed = r.u64(), r.i64()
        return cls(epoch, committed, r.rest_view())

    @staticmethod
    def prefix(epoch: int, committed_chunk_id: int, size: int) -> bytes:
        """The whole frame's head (size prefix included) for ``size`` bytes of chunks."""
        return _CHUNKS_HEAD.pack(20 + size, Key.REPLICA_CHUNKS, 1, epoch, committed_chunk_id)


@_register
@dataclass(slots=True)
class ReplicaAck(Command):
    """Replica to leader, no answer: written up to this chunk, in this epoch."""

    KEY: ClassVar[int] = Key.REPLICA_ACK
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U64, I64, U64)
    epoch: int
    chunk_id: int
    next_offset: int


@_register
@dataclass(slots=True)
class ReplicaCommit(Command):
    """Leader to replica, no answer: the commit point moved while no chunk was flowing."""

    KEY: ClassVar[int] = Key.REPLICA_COMMIT
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U64, I64)
    epoch: int
    committed_chunk_id: int


@_register
@dataclass(slots=True)
class Fence(Command):
    """Operator to broker: raise ``stream``'s epoch to ``epoch`` (persisted before the answer),
    stop writing, fetching and acking; answer with the tail."""

    KEY: ClassVar[int] = Key.FENCE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64)
    correlation_id: int
    stream: str
    epoch: int


@_register
@dataclass(slots=True)
class FenceResponse(Command):
    """The member's epoch now (higher than asked: it refused, code 6), its tail and epoch
    vector."""

    KEY: ClassVar[int] = Key.FENCE
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64, U64, I64, U64, EPOCH_VECTOR)
    correlation_id: int
    code: int
    epoch: int = 0
    tail_epoch: int = 0
    tail_chunk_id: int = -1
    next_offset: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)


@_register
@dataclass(slots=True)
class Assign(Command):
    """Operator to broker: in ``epoch``, lead ``stream`` or follow the leader at host:port;
    ``members`` are the epoch's member set (pod ordinals)."""

    KEY: ClassVar[int] = Key.ASSIGN
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64, U8, STR, U32, array(U16))
    correlation_id: int
    stream: str
    epoch: int
    role: int  # constants.Role
    leader_host: str
    leader_port: int
    members: list[int] = field(default_factory=list)


AssignResponse = _simple_response(Key.ASSIGN, "AssignResponse")


@_register
@dataclass(slots=True)
class ReplicaContact(Command):
    """Placement driver to a member: are you in contact with ``stream``'s leader?"""

    KEY: ClassVar[int] = Key.REPLICA_CONTACT
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    stream: str


@_register
@dataclass(slots=True)
class ReplicaContactResponse(Command):
    """The member's epoch and role (0 fenced, else constants.Role), how many milliseconds ago
    its link last heard from the leader (-1: no link; a leader sends one at least every half
    second), and its tail."""

    KEY: ClassVar[int] = Key.REPLICA_CONTACT
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64, U8, I64, U64, I64, U64)
    correlation_id: int
    code: int
    epoch: int = 0
    role: int = 0
    age_ms: int = -1
    tail_epoch: int = 0
    tail_chunk_id: int = -1
    next_offset: int = 0


@_register
@dataclass(slots=True)
class ReplicaSeal(Command):
    """Placement driver to ``stream``'s leader in ``epoch``: stop taking publishes (``seal``
    1), its feeds and commits going on, for a planned transfer; or take them again (0)."""

    KEY: ClassVar[int] = Key.REPLICA_SEAL
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64, U8)
    correlation_id: int
    stream: str
    epoch: int
    seal: int


@_register
@dataclass(slots=True)
class ReplicaSealResponse(Command):
    """6 when not that epoch's leader; else its tail once sealed (what it took is written)."""

    KEY: ClassVar[int] = Key.REPLICA_SEAL
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64, I64, U64)
    correlation_id: int
    code: int
    tail_epoch: int = 0
    tail_chunk_id: int = -1
    next_offset: int = 0


# A member's single-active-consumer link to the stream's leader (one connection per stream and
# epoch, bound by its first SacJoin): the member's consumers are ``consumer`` ids of its own.

I32 = Codec(Reader.i32, wire.i32)


@_register
@dataclass(slots=True)
class SacJoin(Command):
    """Member to leader: its consumer joins group ``group`` of ``stream`` in ``epoch``;
    ``partition_index`` is the stream's position in its super stream (-1: none)."""

    KEY: ClassVar[int] = Key.SAC_JOIN
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64, U32, STR, I32)
    correlation_id: int
    stream: str
    epoch: int
    consumer: int
    group: str
    partition_index: int = -1


SacJoinResponse = _simple_response(Key.SAC_JOIN, "SacJoinResponse")


@_register
@dataclass(slots=True)
class SacLeave(Command):
    """Member to leader, no answer: its consumer left (unsubscribed, its connection closed)."""

    KEY: ClassVar[int] = Key.SAC_LEAVE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32,)
    consumer: int


@_register
@dataclass(slots=True)
class SacUpdate(Command):
    """Leader to member, no answer: activate the consumer (active=1) or step it down (0)."""

    KEY: ClassVar[int] = Key.SAC_UPDATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8)
    consumer: int
    active: int


@_register
@dataclass(slots=True)
class SacSteppedDown(Command):
    """Member to leader, no answer: the consumer told to step down did (its client answered)."""

    KEY: ClassVar[int] = Key.SAC_STEPPED_DOWN
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32,)
    consumer: int
