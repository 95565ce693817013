"""A small AMQP 1.0 codec for the sections of a message (AMQP 1.0 part 3, section 3.2).

rstream and the Java client publish AMQP 1.0 messages by default: a sequence of described
sections (header, annotations, properties, application-properties, data / amqp-value /
amqp-sequence, footer). Decoding knows the type system's encodings (part 1, section 1.6), for
the Spark source's columns and `streamlet consume --format amqp`; encoding makes the one
message the CLI sends (`produce --format amqp`): a body in one data section, which every
RabbitMQ client's AMQP decoder reads."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# section descriptors (ulong codes)
HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS = 0x70, 0x71, 0x72
PROPERTIES, APPLICATION_PROPERTIES = 0x73, 0x74
DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x75, 0x76, 0x77, 0x78

PROPERTY_NAMES = (
    "message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
    "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
    "reply_to_group_id",
)


class AmqpError(ValueError):
    """Bytes that are not an AMQP 1.0 encoding this decoder knows."""


@dataclass
class Described:
    descriptor: Any
    value: Any


@dataclass
class AmqpMessage:
    body: bytes | None = None
    properties: dict[str, Any] = field(default_factory=dict)
    application_properties: dict[str, Any] = field(default_factory=dict)
    message_annotations: dict[Any, Any] = field(default_factory=dict)


_FIXED: dict[int, tuple[str, int]] = {
    0x50: (">B", 1), 0x51: (">b", 1), 0x60: (">H", 2), 0x61: (">h", 2),
    0x70: (">I", 4), 0x71: (">i", 4), 0x80: (">Q", 8), 0x81: (">q", 8),
    0x72: (">f", 4), 0x82: (">d", 8), 0x73: (">I", 4),
}


def _timestamp(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class _Decoder:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        start, self.pos = self.pos, self.pos + n
        if self.pos > len(self.buf):
            raise AmqpError("truncated AMQP value")
        return self.buf[start:self.pos]

    def _unpack(self, fmt: str, n: int) -> Any:
        return struct.unpack(fmt, self._take(n))[0]

    def value(self) -> Any:
        code = self._unpack(">B", 1)
        if code == 0x00:
            descriptor = self.value()
            return Described(descriptor, self.value())
        return self._typed(code)

    def _typed(self, code: int) -> Any:
        if code == 0x40:
            return None
        if code in (0x41, 0x42):
            return code == 0x41
        if code == 0x56:
            return self._unpack(">B", 1) != 0
        if code in (0x43, 0x44):  # uint0, ulong0
            return 0
        if code in (0x52, 0x53):  # smalluint, smallulong
            return self._unpack(">B", 1)
        if code in (0x54, 0x55):  # smallint, smalllong
            return self._unpack(">b", 1)
        if code in _FIXED:
            fmt, n = _FIXED[code]
            v = self._unpack(fmt, n)
            return chr(v) if code == 0x73 else v
        if code == 0x83:
            return _timestamp(self._unpack(">q", 8))
        if code == 0x98:
            return uuid.UUID(bytes=bytes(self._take(16)))
        if code in (0xA0, 0xB0):
            return bytes(self._take(self._size(code)))
        if code in (0xA1, 0xA3, 0xB1, 0xB3):  # str8, sym8, str32, sym32
            return str(self._take(self._size(code)), "utf-8")
        if code == 0x45:
            return []
        if code in (0xC0, 0xD0):
            return self._compound(code)
        if code in (0xC1, 0xD1):
            items = self._compound(code)
            return dict(zip(items[::2], items[1::2], strict=True))
        if code in (0xE0, 0xF0):
            return self._array(code)
        if code in (0x74, 0x84, 0x94):  # decimal32/64/128: kept as raw bytes
            return bytes(self._take({0x74: 4, 0x84: 8, 0x94: 16}[code]))
        raise AmqpError(f"unknown AMQP type code {code:#04x} at {self.pos - 1}")

    def _size(self, code: int) -> int:
        return int(self._unpack(">B", 1) if code & 0xF0 in (0xA0, 0xC0, 0xE0)
                   else self._unpack(">I", 4))

    def _compound(self, code: int) -> list[Any]:
        size = self._size(code)
        end = self.pos + size
        count = self._unpack(">B", 1) if code == 0xC0 or code == 0xC1 else self._unpack(">I", 4)
        items = [self.value() for _ in range(count)]
        if self.pos != end:
            raise AmqpError("compound size does not match its items")
        return items

    def _array(self, code: int) -> list[Any]:
        size = self._size(code)
        end = self.pos + size
        count = self._unpack(">B", 1) if code == 0xE0 else self._unpack(">I", 4)
        elem = self._unpack(">B", 1)
        descriptor = None
        if elem == 0x00:
            descriptor = self.value()
            elem = self._unpack(">B", 1)
        items = [self._typed(elem) for _ in range(count)]
        if self.pos != end:
            raise AmqpError("array size does not match its items")
        return items if descriptor is None else [Described(descriptor, i) for i in items]


_DATA_SECTION = bytes((0x00, 0x53, DATA))  # described, smallulong descriptor 0x75


def encode_data(body: bytes) -> bytes:
    """A message of one data section holding ``body`` (vbin8, or vbin32 above 255 bytes)."""
    if len(body) <= 0xFF:
        return _DATA_SECTION + bytes((0xA0, len(body))) + body
    return _DATA_SECTION + b"\xb0" + struct.pack(">I", len(body)) + body


def decode_value(buf: bytes | memoryview) -> Any:
    """One AMQP-encoded value."""
    d = _Decoder(buf)
    v = d.value()
    if d.pos != len(d.buf):
        raise AmqpError("bytes left after the value")
    return v


def _code(descriptor: Any) -> Any:
    # symbolic descriptors ("amqp:data:binary") are allowed as well as numeric ones
    names = {"amqp:properties:list": PROPERTIES, "amqp:application-properties:map":
             APPLICATION_PROPERTIES, "amqp:data:binary": DATA, "amqp:amqp-value:*": AMQP_VALUE,
             "amqp:amqp-sequence:list": AMQP_SEQUENCE}
    return names.get(descriptor, descriptor) if isinstance(descriptor, str) else descriptor


def _body_bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return repr(value).encode("utf-8")


def decode_message(buf: bytes | memoryview) -> AmqpMessage:
    """The sections of one message. The body is the data sections joined, or an amqp-value
    (bytes as is, a string as UTF-8, anything else as its repr)."""
    d = _Decoder(buf)
    msg = AmqpMessage()
    body: list[bytes] = []
    while d.pos < len(d.buf):
        section = d.value()
        if not isinstance(section, Described):
            raise AmqpError("a message section must be a described type")
        code, value = _code(section.descriptor), section.value
        if code == PROPERTIES:
            msg.properties = {n: v for n, v in zip(PROPERTY_NAMES, value, strict=False)
                              if v is not None}
        elif code == APPLICATION_PROPERTIES:
            msg.application_properties = dict(value)
        elif code == MESSAGE_ANNOTATIONS:
            msg.message_annotations = dict(value)
        elif code == DATA:
            body.append(bytes(value))
        elif code in (AMQP_VALUE, AMQP_SEQUENCE):
            body.append(_body_bytes(value))
    msg.body = b"".join(body) if body else None
    return msg


def text(value: Any) -> str | None:
    """A property value as a string column holds it."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Described):
        return text(value.value)
    return str(value)
