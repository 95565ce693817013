"""RabbitMQ's consuming commands: Subscribe, Deliver (v1, v2 with the committed chunk id),
Credit, StoreOffset, QueryOffset, Unsubscribe, ConsumerUpdate, as typed values. An offset is a
u64, but an i64 of milliseconds for a timestamp (offset type 5)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .. import fields as wire
from ..constants import Key
from ..fields import Reader
from .base import (
    STR,
    U8,
    U16,
    U32,
    U64,
    Codec,
    Command,
    offset_codec,
    register,
    simple_response,
)


@register
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
        offset = offset_codec(self.offset_type).write(self.offset) if self.offset_type in (4, 5) else b""
        return (wire.u32(self.correlation_id) + wire.u8(self.subscription_id) + wire.string(self.stream)
                + wire.u16(self.offset_type) + offset + wire.u16(self.credit)
                + wire.properties(self.properties))

    @classmethod
    def read(cls, r: Reader, version: int) -> Subscribe:
        corr, sub, stream, otype = r.u32(), r.u8(), r.str_(), r.u16()
        offset = offset_codec(otype).read(r) if otype in (4, 5) else 0
        credit = r.u16()
        return cls(corr, sub, stream, otype, offset, credit, r.properties() if r.remaining() else {})


SubscribeResponse = simple_response(Key.SUBSCRIBE, "SubscribeResponse")


@register
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


@register
@dataclass(slots=True)
class Credit(Command):
    KEY: ClassVar[int] = Key.CREDIT
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U8, U16)
    subscription_id: int
    credit: int


@register
@dataclass(slots=True)
class CreditResponse(Command):
    """Sent only on error; note it has no correlation id."""

    KEY: ClassVar[int] = Key.CREDIT
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U16, U8)
    code: int
    subscription_id: int


@register
@dataclass(slots=True)
class StoreOffset(Command):
    KEY: ClassVar[int] = Key.STORE_OFFSET
    LAYOUT: ClassVar[tuple[Codec, ...]] = (STR, STR, U64)
    reference: str
    stream: str
    offset: int


@register
@dataclass(slots=True)
class QueryOffset(Command):
    KEY: ClassVar[int] = Key.QUERY_OFFSET
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, STR)
    correlation_id: int
    reference: str
    stream: str


@register
@dataclass(slots=True)
class QueryOffsetResponse(Command):
    KEY: ClassVar[int] = Key.QUERY_OFFSET
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64)
    correlation_id: int
    code: int
    offset: int


@register
@dataclass(slots=True)
class Unsubscribe(Command):
    KEY: ClassVar[int] = Key.UNSUBSCRIBE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8)
    correlation_id: int
    subscription_id: int


UnsubscribeResponse = simple_response(Key.UNSUBSCRIBE, "UnsubscribeResponse")


@register
@dataclass(slots=True)
class ConsumerUpdate(Command):
    """Server to client: this subscription became active (1) or passive (0)."""

    KEY: ClassVar[int] = Key.CONSUMER_UPDATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8, U8)
    correlation_id: int
    subscription_id: int
    active: int


@register
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
                + offset_codec(self.offset_type).write(self.offset))

    @classmethod
    def read(cls, r: Reader, version: int) -> ConsumerUpdateResponse:
        corr, code, otype = r.u32(), r.u16(), r.u16()
        offset = offset_codec(otype).read(r) if r.remaining() else 0
        return cls(corr, code, otype, offset)
