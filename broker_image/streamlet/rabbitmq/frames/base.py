"""What every command shares: the frame's header, the field codecs, the ``Command`` base, the
registry the family modules fill, and :func:`encode` / :func:`decode` (imported from
:mod:`streamlet.rabbitmq.frames`, which loads every family so that the registry is whole).

A frame on the wire is ``Size u32 | Key u16 | Version u16 | body``; responses set the top bit
of the key. A malformed frame decodes to a :class:`FrameError` carrying the protocol's response
code: nothing raises out of :func:`decode`. Most commands are declared by their ``LAYOUT``, one
field codec per dataclass field, in order; the few whose layout depends on a value write
``body`` and ``read`` by hand.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from .. import fields as wire
from ..constants import RESPONSE_FLAG, Code, Key
from ..fields import Malformed, Reader

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
I32 = Codec(Reader.i32, wire.i32)


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


#: wire key (response bit included) -> its command class, filled by the family modules
REGISTRY: dict[int, type[Command]] = {}


def register(cls: type[Command]) -> type[Command]:
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


def offset_codec(offset_type: int) -> Codec:
    """Offsets are u64, but a timestamp (offset type 5) is an i64 of milliseconds."""
    return I64 if offset_type == 5 else U64


@dataclass(slots=True)
class SimpleResponse(Command):
    """A response that carries only a correlation id and a code."""

    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16)
    correlation_id: int = 0
    code: int = Code.OK


def simple_response(key: Key, name: str) -> type[SimpleResponse]:
    cls = type(name, (SimpleResponse,), {"KEY": key, "__slots__": ()})
    register(cls)
    return cls

