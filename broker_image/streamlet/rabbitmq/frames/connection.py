"""RabbitMQ's connection commands: PeerProperties, SaslHandshake, SaslAuthenticate, Tune, Open,
Close, Heartbeat, ExchangeCommandVersions, as typed values. A Tune that comes back with the
response bit set (some clients echo it so) decodes as a Tune."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..constants import RESPONSE_FLAG, Key
from .base import (
    BYTES,
    PROPERTIES,
    REGISTRY,
    STR,
    U16,
    U32,
    Codec,
    Command,
    absent_if_none,
    array,
    optional_tail,
    record,
    register,
    simple_response,
)


@register
@dataclass(slots=True)
class PeerProperties(Command):
    KEY: ClassVar[int] = Key.PEER_PROPERTIES
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, PROPERTIES)
    correlation_id: int
    properties: dict[str, str] = field(default_factory=dict)


@register
@dataclass(slots=True)
class PeerPropertiesResponse(Command):
    KEY: ClassVar[int] = Key.PEER_PROPERTIES
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, optional_tail(PROPERTIES, dict))
    correlation_id: int
    code: int
    properties: dict[str, str] = field(default_factory=dict)


@register
@dataclass(slots=True)
class SaslHandshake(Command):
    KEY: ClassVar[int] = Key.SASL_HANDSHAKE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32,)
    correlation_id: int


@register
@dataclass(slots=True)
class SaslHandshakeResponse(Command):
    KEY: ClassVar[int] = Key.SASL_HANDSHAKE
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, optional_tail(array(STR), list))
    correlation_id: int
    code: int
    mechanisms: list[str] = field(default_factory=list)


@register
@dataclass(slots=True)
class SaslAuthenticate(Command):
    KEY: ClassVar[int] = Key.SASL_AUTHENTICATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, BYTES)
    correlation_id: int
    mechanism: str
    data: bytes | None


@register
@dataclass(slots=True)
class SaslAuthenticateResponse(Command):
    """The challenge bytes are present only when the server sends one."""

    KEY: ClassVar[int] = Key.SASL_AUTHENTICATE
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, absent_if_none(BYTES))
    correlation_id: int
    code: int
    data: bytes | None = None


@register
@dataclass(slots=True)
class Tune(Command):
    """Sent by the server first; the client echoes the values it agrees on."""

    KEY: ClassVar[int] = Key.TUNE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U32)
    frame_max: int
    heartbeat: int


@register
@dataclass(slots=True)
class Open(Command):
    KEY: ClassVar[int] = Key.OPEN
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    virtual_host: str


@register
@dataclass(slots=True)
class OpenResponse(Command):
    KEY: ClassVar[int] = Key.OPEN
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, optional_tail(PROPERTIES, dict))
    correlation_id: int
    code: int
    properties: dict[str, str] = field(default_factory=dict)


@register
@dataclass(slots=True)
class Close(Command):
    KEY: ClassVar[int] = Key.CLOSE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, STR)
    correlation_id: int
    code: int
    reason: str


CloseResponse = simple_response(Key.CLOSE, "CloseResponse")


@register
@dataclass(slots=True)
class Heartbeat(Command):
    KEY: ClassVar[int] = Key.HEARTBEAT


@dataclass(slots=True)
class CommandVersion:
    key: int
    min_version: int
    max_version: int


_VERSIONS = array(record(CommandVersion, U16, U16, U16))


@register
@dataclass(slots=True)
class ExchangeCommandVersions(Command):
    KEY: ClassVar[int] = Key.EXCHANGE_COMMAND_VERSIONS
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, _VERSIONS)
    correlation_id: int
    versions: list[CommandVersion]


@register
@dataclass(slots=True)
class ExchangeCommandVersionsResponse(Command):
    KEY: ClassVar[int] = Key.EXCHANGE_COMMAND_VERSIONS
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, _VERSIONS)
    correlation_id: int
    code: int
    versions: list[CommandVersion]




#: some clients echo Tune as a response
REGISTRY[Key.TUNE | RESPONSE_FLAG] = Tune
