"""RabbitMQ's super stream commands: Route, Partitions, CreateSuperStream, DeleteSuperStream, as
typed values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..constants import Code, Key
from .base import (
    PROPERTIES,
    STR,
    U16,
    U32,
    Codec,
    Command,
    array,
    optional_tail,
    register,
    simple_response,
)


@register
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


@register
@dataclass(slots=True)
class RouteResponse(_StreamsResponse):
    KEY: ClassVar[int] = Key.ROUTE


@register
@dataclass(slots=True)
class Partitions(Command):
    KEY: ClassVar[int] = Key.PARTITIONS
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    super_stream: str


@register
@dataclass(slots=True)
class PartitionsResponse(_StreamsResponse):
    KEY: ClassVar[int] = Key.PARTITIONS


@register
@dataclass(slots=True)
class CreateSuperStream(Command):
    KEY: ClassVar[int] = Key.CREATE_SUPER_STREAM
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, array(STR), array(STR), PROPERTIES)
    correlation_id: int
    name: str
    partitions: list[str]
    binding_keys: list[str]
    arguments: dict[str, str] = field(default_factory=dict)


CreateSuperStreamResponse = simple_response(Key.CREATE_SUPER_STREAM, "CreateSuperStreamResponse")


@register
@dataclass(slots=True)
class DeleteSuperStream(Command):
    KEY: ClassVar[int] = Key.DELETE_SUPER_STREAM
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    name: str


DeleteSuperStreamResponse = simple_response(Key.DELETE_SUPER_STREAM, "DeleteSuperStreamResponse")
