"""RabbitMQ's stream commands: Create, Delete, Metadata (with its brokers and per-stream codes),
MetadataUpdate, StreamStats, ResolveOffsetSpec, as typed values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .. import fields as wire
from ..constants import Key
from ..fields import Reader
from .base import (
    I64,
    PROPERTIES,
    STR,
    U16,
    U32,
    Codec,
    Command,
    array,
    mapping,
    offset_codec,
    optional_tail,
    record,
    register,
    simple_response,
)


@register
@dataclass(slots=True)
class Create(Command):
    KEY: ClassVar[int] = Key.CREATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, PROPERTIES)
    correlation_id: int
    stream: str
    arguments: dict[str, str] = field(default_factory=dict)


CreateResponse = simple_response(Key.CREATE, "CreateResponse")


@register
@dataclass(slots=True)
class Delete(Command):
    KEY: ClassVar[int] = Key.DELETE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    stream: str


DeleteResponse = simple_response(Key.DELETE, "DeleteResponse")


@register
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


@register
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


@register
@dataclass(slots=True)
class MetadataUpdate(Command):
    KEY: ClassVar[int] = Key.METADATA_UPDATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U16, STR)
    code: int
    stream: str


@register
@dataclass(slots=True)
class StreamStats(Command):
    KEY: ClassVar[int] = Key.STREAM_STATS
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    stream: str


@register
@dataclass(slots=True)
class StreamStatsResponse(Command):
    KEY: ClassVar[int] = Key.STREAM_STATS
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, optional_tail(mapping(STR, I64), dict))
    correlation_id: int
    code: int
    stats: dict[str, int] = field(default_factory=dict)


@register
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
                + offset_codec(self.offset_type).write(self.offset) + wire.properties(self.properties))

    @classmethod
    def read(cls, r: Reader, version: int) -> ResolveOffsetSpec:
        corr, stream, otype = r.u32(), r.str_(), r.u16()
        offset = offset_codec(otype).read(r)
        return cls(corr, stream, otype, offset, r.properties() if r.remaining() else {})


@register
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
