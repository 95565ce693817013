"""RabbitMQ's publishing commands: DeclarePublisher, Publish (v1, v2 with filter values),
PublishConfirm, PublishError, QueryPublisherSequence, DeletePublisher, as typed values. The
general form: the broker's Publish in and PublishConfirm out have their fast path in
:mod:`streamlet.rabbitmq.publish`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .. import fields as wire
from ..constants import Key
from ..fields import Malformed, Reader
from .base import (
    NULLABLE_STR,
    STR,
    U8,
    U16,
    U32,
    U64,
    U64_ARRAY,
    Codec,
    Command,
    array,
    record,
    register,
    simple_response,
)


@register
@dataclass(slots=True)
class DeclarePublisher(Command):
    KEY: ClassVar[int] = Key.DECLARE_PUBLISHER
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8, NULLABLE_STR, STR)
    correlation_id: int
    publisher_id: int
    reference: str | None
    stream: str


DeclarePublisherResponse = simple_response(Key.DECLARE_PUBLISHER, "DeclarePublisherResponse")


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


@register
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


@register
@dataclass(slots=True)
class PublishConfirm(Command):
    KEY: ClassVar[int] = Key.PUBLISH_CONFIRM
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U8, U64_ARRAY)
    publisher_id: int
    publishing_ids: list[int]


@register
@dataclass(slots=True)
class PublishError(Command):
    KEY: ClassVar[int] = Key.PUBLISH_ERROR
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U8, array(record(tuple, U64, U16)))
    publisher_id: int
    errors: list[tuple[int, int]]  # (publishing id, code)


@register
@dataclass(slots=True)
class QueryPublisherSequence(Command):
    KEY: ClassVar[int] = Key.QUERY_PUBLISHER_SEQUENCE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, STR)
    correlation_id: int
    reference: str
    stream: str


@register
@dataclass(slots=True)
class QueryPublisherSequenceResponse(Command):
    KEY: ClassVar[int] = Key.QUERY_PUBLISHER_SEQUENCE
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64)
    correlation_id: int
    code: int
    sequence: int


@register
@dataclass(slots=True)
class DeletePublisher(Command):
    KEY: ClassVar[int] = Key.DELETE_PUBLISHER
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8)
    correlation_id: int
    publisher_id: int


DeletePublisherResponse = simple_response(Key.DELETE_PUBLISHER, "DeletePublisherResponse")
