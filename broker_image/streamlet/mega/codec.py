"""MEGA requests and responses (docs/protocols/mega.md). Every integer is big-endian.

A request is a header (correlation u32, type u8, topic length u32, topic, timestamp u64) and,
by type: CREATE_TOPIC (3) nothing more, PRODUCE (1) payload length u32 + payload, CONSUME (2)
offset u32. There is no length prefix: ``MegaSplitter`` knows the layout, and bounds a request
by the topic and payload limits before it buffers one. A response is a success (correlation
u32, flag u8 = 1, timestamp u64, payload) or an error (correlation u32, flag u8 = 0, code u8);
the success payload depends on the request's type: none for CREATE_TOPIC, the offset as u64 for
PRODUCE, u32 length + the message for CONSUME.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum

from ..wire.framing import FrameTooLarge, Splitter


class MessageType(IntEnum):
    PRODUCE = 0x01
    CONSUME = 0x02
    CREATE_TOPIC = 0x03


class ErrorCode(IntEnum):
    INVALID_REQUEST = 1
    INVALID_MESSAGE_TYPE = 2
    MESSAGE_TOO_LARGE = 3
    TOPIC_NOT_FOUND = 4
    TOPIC_ALREADY_EXISTS = 5
    INVALID_OFFSET = 6
    INTERNAL_ERROR = 7
    NETWORK_ERROR = 8
    RESOURCE_EXHAUSTED = 9


#: A stream name has at most 255 bytes: a longer topic can never name one.
DEFAULT_MAX_TOPIC = 255
#: The largest PRODUCE payload taken (``[listeners.mega] max_payload_bytes``).
DEFAULT_MAX_PAYLOAD = 1 << 20

HEAD = struct.Struct(">IBI")  # correlation, type, topic length
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_SUCCESS = struct.Struct(">IBQ")  # correlation, 1, timestamp
_ERROR = struct.Struct(">IBB")  # correlation, 0, code
_TYPES = frozenset(int(t) for t in MessageType)


class FramingLost(FrameTooLarge):
    """A request whose end cannot be found or must not be buffered (an unknown type, a topic or
    payload past its limit): answered with ``code`` under ``correlation``, then the connection
    is closed. A FrameTooLarge, so the transport treats it as every protocol's framing error."""

    def __init__(self, correlation: int, code: ErrorCode, reason: str, size: int = 0,
                 limit: int = 0) -> None:
        super().__init__(size, limit)
        self.args = (reason,)
        self.correlation = correlation
        self.code = code


@dataclass(frozen=True, slots=True)
class Request:
    correlation: int
    type: MessageType
    topic: bytes  # as sent: the adapter checks it names a stream
    timestamp: int  # the client's; the broker keeps its own time
    payload: bytes | None = None  # PRODUCE
    offset: int | None = None  # CONSUME


class MegaSplitter(Splitter):
    """MEGA's requests (each handed out as all its bytes, header included): the shared
    splitter (wire/framing.py) told MEGA's layout.

    ``pending`` is the request's whole length once its header (and, for PRODUCE, its payload
    length) says it. A request is measured before it is buffered: a topic past ``max_topic`` or
    a payload past ``max_payload`` raises FramingLost (MESSAGE_TOO_LARGE), an unknown type
    FramingLost (INVALID_MESSAGE_TYPE).
    """

    __slots__ = ("max_payload", "max_topic")

    def __init__(self, max_topic: int = DEFAULT_MAX_TOPIC,
                 max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.max_topic = max_topic
        self.max_payload = max_payload
        # the header of the largest request says its length; the largest request is taken
        head_max = HEAD.size + max_topic + 8 + 4
        super().__init__(head_max + max_payload, head_max)

    def measure(self, buf: bytes | memoryview, pos: int = 0) -> int | None:
        """The length of the request starting at ``buf[pos:]``, None while its bytes there do
        not say it yet; FramingLost if it must not be taken."""
        left = len(buf) - pos
        if left < HEAD.size:
            return None
        correlation, kind, topic_len = HEAD.unpack_from(buf, pos)
        if kind not in _TYPES:
            raise FramingLost(correlation, ErrorCode.INVALID_MESSAGE_TYPE,
                              f"unknown message type {kind:#04x}")
        if topic_len > self.max_topic:
            raise FramingLost(correlation, ErrorCode.MESSAGE_TOO_LARGE,
                              f"topic of {topic_len} bytes exceeds the limit of {self.max_topic}",
                              topic_len, self.max_topic)
        fixed = HEAD.size + int(topic_len) + 8
        if kind == MessageType.CREATE_TOPIC:
            return fixed
        if kind == MessageType.CONSUME:
            return fixed + 4
        if left < fixed + 4:
            return None
        size = int(_U32.unpack_from(buf, pos + fixed)[0])
        if size > self.max_payload:
            raise FramingLost(correlation, ErrorCode.MESSAGE_TOO_LARGE,
                              f"payload of {size} bytes exceeds the limit of {self.max_payload}",
                              size, self.max_payload)
        return fixed + 4 + size


def decode_request(frame: bytes | memoryview) -> Request:
    """One whole request, as MegaSplitter cut it (ValueError if its length is not its layout's)."""
    correlation, kind, topic_len = HEAD.unpack_from(frame, 0)
    at = HEAD.size + topic_len
    topic = bytes(frame[HEAD.size : at])
    timestamp = _U64.unpack_from(frame, at)[0]
    at += 8
    mtype = MessageType(kind)
    payload = offset = None
    if mtype == MessageType.PRODUCE:
        size = _U32.unpack_from(frame, at)[0]
        payload = bytes(frame[at + 4 : at + 4 + size])
        at += 4 + size
    elif mtype == MessageType.CONSUME:
        offset = _U32.unpack_from(frame, at)[0]
        at += 4
    if at != len(frame):
        raise ValueError(f"request of {len(frame)} bytes, its layout says {at}")
    return Request(correlation, mtype, topic, timestamp, payload, offset)


def encode_request(correlation: int, kind: int, topic: bytes | str, timestamp: int = 0, *,
                   payload: bytes | None = None, offset: int | None = None) -> bytes:
    """A request's bytes (the client's side). ``kind`` is any byte: tests send unknown ones."""
    raw = topic.encode() if isinstance(topic, str) else topic
    parts = [HEAD.pack(correlation, kind, len(raw)), raw, _U64.pack(timestamp)]
    if payload is not None:
        parts += [_U32.pack(len(payload)), payload]
    if offset is not None:
        parts.append(_U32.pack(offset))
    return b"".join(parts)


def encode_success(correlation: int, timestamp: int, payload: bytes = b"") -> bytes:
    return _SUCCESS.pack(correlation, 1, timestamp) + payload


def encode_error(correlation: int, code: ErrorCode) -> bytes:
    return _ERROR.pack(correlation, 0, code)


def produced(offset: int) -> bytes:
    """PRODUCE's success payload: the offset the message got, u64."""
    return _U64.pack(offset)


def consumed(message: bytes | memoryview) -> bytes:
    """CONSUME's success payload: the message's length u32, then the message."""
    return _U32.pack(len(message)) + bytes(message)


@dataclass(frozen=True, slots=True)
class Response:
    correlation: int
    ok: bool
    timestamp: int = 0  # success only
    code: ErrorCode | int = 0  # error only
    offset: int | None = None  # PRODUCE's success
    message: bytes | None = None  # CONSUME's success


def decode_response(buf: bytes | bytearray | memoryview,
                    kind_of: Callable[[int], MessageType | None]) -> tuple[Response, int] | None:
    """The response at the start of ``buf`` and its length, None if ``buf`` holds only part of
    it. Its layout depends on its request's type, which ``kind_of(correlation)`` gives (a
    response carries none); ValueError for a response no request explains."""
    if len(buf) < _ERROR.size:
        return None
    correlation, flag = struct.unpack_from(">IB", buf, 0)
    if flag == 0:
        return Response(correlation, False, code=_code(buf[5])), _ERROR.size
    if flag != 1:
        raise ValueError(f"response flag {flag}")
    kind = kind_of(correlation)
    if kind is None:
        raise ValueError(f"a response to correlation {correlation}, which was not asked")
    if len(buf) < _SUCCESS.size:
        return None
    timestamp = _U64.unpack_from(buf, 5)[0]
    at = _SUCCESS.size
    if kind == MessageType.CREATE_TOPIC:
        return Response(correlation, True, timestamp), at
    if kind == MessageType.PRODUCE:
        if len(buf) < at + 8:
            return None
        return Response(correlation, True, timestamp, offset=_U64.unpack_from(buf, at)[0]), at + 8
    if len(buf) < at + 4:
        return None
    size = _U32.unpack_from(buf, at)[0]
    if len(buf) < at + 4 + size:
        return None
    return (Response(correlation, True, timestamp, message=bytes(buf[at + 4 : at + 4 + size])),
            at + 4 + size)


def _code(value: int) -> ErrorCode | int:
    try:
        return ErrorCode(value)
    except ValueError:
        return value


def iter_responses(buf: bytearray, kind_of: Callable[[int], MessageType | None]
                   ) -> Iterator[Response]:
    """The whole responses at the start of ``buf``, removed from it as they are yielded."""
    while (got := decode_response(buf, kind_of)) is not None:
        response, size = got
        del buf[:size]
        yield response
