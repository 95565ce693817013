"""Reactive Streams IO frames (docs/protocols/reactive-streams.md). No sockets, no files.

A frame is protobuf's delimited-stream unit: a varint length, then that many bytes: a varint
message type and the message's fields in the order the specification lists them, without
field tags. A varint is protobuf's (unsigned LEB128, at most 10 bytes, a u64); a string is a
varint byte count and UTF-8; an array a varint count and its items. The element bytes that end
onNext, onNextPacked, onNextPart and onNextLastPart are the rest of the frame (not
length-prefixed: the frame's length says where they end).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from ..wire.framing import FrameTooLarge, Splitter

#: the protocol version this codec speaks (the specification's version 0)
VERSION = 0
#: The extensions this implementation defines: OFFSETS adds the ``position`` message.
EXT_OFFSETS = 1

#: Bounds that keep a frame's decoding cheap whatever the peer sends.
MAX_STRING = 65_536  # publisher strings, error and goodbye reasons
MAX_EXTENSIONS = 64
#: The default for the largest frame taken (``[listeners.rsio] max_element_bytes`` + overhead).
DEFAULT_MAX_ELEMENT = 1 << 20
#: room in a frame beside its element: type, ids, count (each at most a 10-byte varint)
FRAME_OVERHEAD = 64
#: the longest varint: 10 bytes hold a u64
_VARINT_MAX = 10
U64_MAX = (1 << 64) - 1


class Type(IntEnum):
    HELLO = 1
    GOODBYE = 2
    SUBSCRIBE = 3
    REQUEST = 4
    CANCEL = 5
    SUBSCRIBED = 6
    ON_NEXT = 7
    ON_COMPLETE = 8
    ON_ERROR = 9
    ON_NEXT_PACKED = 10
    ON_NEXT_PART = 11
    ON_NEXT_LAST_PART = 12
    POSITION = 32  # extension 1 (offsets)


class Malformed(ValueError):
    """A whole frame (framing is kept) whose content is not a message of this protocol."""


class FramingLost(FrameTooLarge):
    """A frame whose end cannot be found (a length that is not a varint) or that must not be
    buffered (longer than the limit): the connection says goodbye and closes."""

    def __init__(self, reason: str, size: int = 0, limit: int = 0) -> None:
        super().__init__(size, limit)
        self.args = (reason,)
        self.reason = reason


# --- messages -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Hello:
    version: int
    extensions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Goodbye:
    reason: str


@dataclass(frozen=True, slots=True)
class Subscribe:
    publisher: str
    subscriber: int
    initial_demand: int = 0


@dataclass(frozen=True, slots=True)
class Request:
    subscriber: int
    demand: int


@dataclass(frozen=True, slots=True)
class Cancel:
    subscriber: int


@dataclass(frozen=True, slots=True)
class Subscribed:
    subscriber: int
    element_size: int = 0


@dataclass(frozen=True, slots=True)
class OnNext:
    subscriber: int
    element: bytes


@dataclass(frozen=True, slots=True)
class OnComplete:
    subscriber: int


@dataclass(frozen=True, slots=True)
class OnError:
    subscriber: int
    error: str


@dataclass(frozen=True, slots=True)
class OnNextPacked:
    subscriber: int
    count: int
    data: bytes  # count * elementSize bytes: the receiver knows elementSize


@dataclass(frozen=True, slots=True)
class OnNextPart:
    subscriber: int
    element: int
    data: bytes


@dataclass(frozen=True, slots=True)
class OnNextLastPart:
    subscriber: int
    element: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Position:
    """Extension 1 (offsets): the next element sent to ``subscriber`` is the stream's message at
    ``offset``; each element after it is at the next offset, until another Position."""

    subscriber: int
    offset: int


Message = (Hello | Goodbye | Subscribe | Request | Cancel | Subscribed | OnNext | OnComplete
           | OnError | OnNextPacked | OnNextPart | OnNextLastPart | Position)


# --- primitives ---------------------------------------------------------------------------------

_SMALL = [bytes((i,)) for i in range(128)]


def varint(n: int) -> bytes:
    """protobuf's unsigned varint (LEB128) of 0 <= n < 2^64."""
    if n < 128:
        if n < 0:
            raise ValueError(f"a varint is unsigned, got {n}")
        return _SMALL[n]
    if n > U64_MAX:
        raise ValueError(f"a varint holds at most 64 bits, got {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(buf: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int] | None:
    """(value, position after it) of the varint at ``buf[pos:end]``; None if it continues past
    ``end``; Malformed past 10 bytes or 64 bits."""
    value = shift = 0
    for i in range(pos, min(end, pos + _VARINT_MAX)):
        b = buf[i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if value > U64_MAX:
                raise Malformed("a varint past 64 bits")
            return value, i + 1
        shift += 7
    if end - pos >= _VARINT_MAX:
        raise Malformed("a varint longer than 10 bytes")
    return None


def _string(s: str) -> bytes:
    raw = s.encode()
    return varint(len(raw)) + raw


# --- encoding -----------------------------------------------------------------------------------

def frame(*parts: bytes) -> bytes:
    """A frame of the joined ``parts`` (the type first)."""
    body = b"".join(parts)
    return varint(len(body)) + body


def encode(msg: Message) -> bytes:
    """One whole frame."""
    t = _TYPE_OF[type(msg)]
    v = varint
    if isinstance(msg, Hello):
        return frame(v(t), v(msg.version), v(len(msg.extensions)), *map(v, msg.extensions))
    if isinstance(msg, Goodbye):
        return frame(v(t), _string(msg.reason))
    if isinstance(msg, Subscribe):
        return frame(v(t), _string(msg.publisher), v(msg.subscriber), v(msg.initial_demand))
    if isinstance(msg, Request):
        return frame(v(t), v(msg.subscriber), v(msg.demand))
    if isinstance(msg, Cancel | OnComplete):
        return frame(v(t), v(msg.subscriber))
    if isinstance(msg, Subscribed):
        return frame(v(t), v(msg.subscriber), v(msg.element_size))
    if isinstance(msg, OnNext):
        return frame(v(t), v(msg.subscriber), msg.element)
    if isinstance(msg, OnError):
        return frame(v(t), v(msg.subscriber), _string(msg.error))
    if isinstance(msg, OnNextPacked):
        return frame(v(t), v(msg.subscriber), v(msg.count), msg.data)
    if isinstance(msg, OnNextPart | OnNextLastPart):
        return frame(v(t), v(msg.subscriber), v(msg.element), msg.data)
    return frame(v(t), v(msg.subscriber), v(msg.offset))


def on_next_head(subscriber: int, size: int) -> bytes:
    """The bytes before an element of ``size`` bytes in its onNext frame: the hot path writes
    them and the stored element as two buffers, the element uncopied."""
    sub = varint(subscriber)
    return varint(1 + len(sub) + size) + b"\x07" + sub


# --- decoding -----------------------------------------------------------------------------------

class _Cursor:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int, end: int) -> None:
        self.buf, self.pos, self.end = buf, pos, end

    def varint(self) -> int:
        got = read_varint(self.buf, self.pos, self.end)
        if got is None:
            raise Malformed("the frame ends inside a varint")
        value, self.pos = got
        return value

    def string(self) -> str:
        n = self.varint()
        if n > MAX_STRING or self.pos + n > self.end:
            raise Malformed(f"a string of {n} bytes does not fit (at most {MAX_STRING})")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise Malformed("a string that is not UTF-8") from None

    def rest(self) -> bytes:
        out = bytes(self.buf[self.pos : self.end])
        self.pos = self.end
        return out

    def done(self) -> None:
        if self.pos != self.end:
            raise Malformed(f"{self.end - self.pos} bytes past the message's last field")


def decode(frame_: bytes | memoryview) -> Message:
    """The message of one whole frame (length prefix included, as RsioSplitter cuts it);
    Malformed when it is not one. Never raises anything else."""
    got = read_varint(frame_, 0, len(frame_))
    if got is None:
        raise Malformed("no frame length")
    size, at = got
    if at + size != len(frame_):
        raise Malformed(f"a frame of {len(frame_) - at} bytes whose length says {size}")
    c = _Cursor(frame_, at, len(frame_))
    kind = c.varint()
    msg: Message
    if kind == Type.HELLO:
        version, n = c.varint(), c.varint()
        if n > MAX_EXTENSIONS:
            raise Malformed(f"{n} extensions (at most {MAX_EXTENSIONS})")
        msg = Hello(version, tuple(c.varint() for _ in range(n)))
    elif kind == Type.GOODBYE:
        msg = Goodbye(c.string())
    elif kind == Type.SUBSCRIBE:
        msg = Subscribe(c.string(), c.varint(), c.varint())
    elif kind == Type.REQUEST:
        msg = Request(c.varint(), c.varint())
    elif kind == Type.CANCEL:
        msg = Cancel(c.varint())
    elif kind == Type.SUBSCRIBED:
        msg = Subscribed(c.varint(), c.varint())
    elif kind == Type.ON_NEXT:
        msg = OnNext(c.varint(), c.rest())
    elif kind == Type.ON_COMPLETE:
        msg = OnComplete(c.varint())
    elif kind == Type.ON_ERROR:
        msg = OnError(c.varint(), c.string())
    elif kind == Type.ON_NEXT_PACKED:
        msg = OnNextPacked(c.varint(), c.varint(), c.rest())
    elif kind == Type.ON_NEXT_PART:
        msg = OnNextPart(c.varint(), c.varint(), c.rest())
    elif kind == Type.ON_NEXT_LAST_PART:
        msg = OnNextLastPart(c.varint(), c.varint(), c.rest())
    elif kind == Type.POSITION:
        msg = Position(c.varint(), c.varint())
    else:
        raise Malformed(f"unknown message type {kind}")
    c.done()
    return msg


_TYPE_OF: dict[type, int] = {
    Hello: Type.HELLO, Goodbye: Type.GOODBYE, Subscribe: Type.SUBSCRIBE, Request: Type.REQUEST,
    Cancel: Type.CANCEL, Subscribed: Type.SUBSCRIBED, OnNext: Type.ON_NEXT,
    OnComplete: Type.ON_COMPLETE, OnError: Type.ON_ERROR, OnNextPacked: Type.ON_NEXT_PACKED,
    OnNextPart: Type.ON_NEXT_PART, OnNextLastPart: Type.ON_NEXT_LAST_PART,
    Position: Type.POSITION,
}


class RsioSplitter(Splitter):
    """RSIO frames, each handed out whole (its varint length included: ``decode`` takes it
    so): the shared splitter (wire/framing.py) told the varint length prefix. A frame
    longer than ``max_size`` raises FramingLost before any of it is buffered, as does a length
    that is not a varint."""

    __slots__ = ()

    def __init__(self, max_size: int = DEFAULT_MAX_ELEMENT + FRAME_OVERHEAD) -> None:
        super().__init__(max_size, _VARINT_MAX)

    def measure(self, buf: bytes | memoryview, pos: int = 0) -> int | None:
        try:
            got = read_varint(buf, pos, len(buf))
        except Malformed as e:
            raise FramingLost(f"a frame length that is not a varint ({e})") from None
        if got is None:
            return None
        size, at = got
        whole = at - pos + size
        if self.max_size and whole > self.max_size:  # 0: no limit (a client's)
            raise FramingLost(f"a frame of {whole} bytes exceeds the limit of {self.max_size}",
                              whole, self.max_size)
        return whole


def iter_frames(buf: bytearray, max_size: int = 0) -> Iterator[Message]:
    """The whole messages at the start of ``buf``, removed from it as they are yielded (a
    client's reading loop); Malformed for a frame that is not a message, FramingLost for a
    length past ``max_size`` (0: no limit)."""
    while True:
        got = read_varint(buf, 0, len(buf))
        if got is None:
            return
        size, at = got
        if max_size and at + size > max_size:
            raise FramingLost(f"a frame of {at + size} bytes exceeds {max_size}", at + size,
                              max_size)
        if len(buf) < at + size:
            return
        raw = bytes(buf[: at + size])
        del buf[: at + size]
        yield decode(raw)
