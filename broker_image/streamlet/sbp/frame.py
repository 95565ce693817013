"""SBP frames (docs/protocols/sbp.md): the 12-byte header, the extended header's 4-byte prefix,
the extended header and the payload. Big-endian throughout.

    length u32 | magic u8 (23) | opcode u16 | flags u8 | stream id u32 |
    format u8 (0x01) | header length u24 | header | payload

``length`` counts the whole frame, itself included (the specification's "16 + Header.length +
Payload.length"), so a frame is never shorter than 16 bytes. No sockets here: ``SbpSplitter``
cuts a byte stream, ``decode`` reads one frame, ``encode`` writes one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag

from ..wire.framing import FrameTooLarge, Splitter

MAGIC = 23
FORMAT_FLATBUFFERS = 0x01
#: the fixed header and the extended header's prefix
PREFIX = struct.Struct(">IBHBIB")  # length, magic, opcode, flags, stream id, format
PREFIX_SIZE = 16
MAX_HEADER = (1 << 24) - 1
#: a frame's default size limit ([listeners.sbp] max_frame_bytes)
DEFAULT_MAX_FRAME = 16 << 20
_LENGTH = struct.Struct(">I")


class Opcode(IntEnum):
    PING = 0x0001
    GOAWAY = 0x0002
    HEARTBEAT = 0x0003
    ALLOCATE_ID = 0x0004
    APPEND = 0x1001
    FETCH = 0x1002
    LIST_RANGES = 0x2001
    SEAL_RANGE = 0x2002
    SYNC_RANGES = 0x2003
    CREATE_RANGE = 0x2004
    DESCRIBE_RANGE = 0x2005
    CREATE_STREAMS = 0x3001
    DELETE_STREAMS = 0x3002
    UPDATE_STREAMS = 0x3003
    DESCRIBE_STREAMS = 0x3004
    TRIM_STREAMS = 0x3005
    REPORT_METRICS = 0x4001
    DESCRIBE_PD_CLUSTER = 0x4002


OPCODES = frozenset(int(o) for o in Opcode)


class Flags(IntFlag):
    NONE = 0
    RESPONSE = 0x01
    RESPONSE_END = 0x02
    SYSTEM_ERROR = 0x04


#: a whole answer in one frame
LAST = Flags.RESPONSE | Flags.RESPONSE_END
_RESPONSE, _RESPONSE_END, _SYSTEM_ERROR = (int(Flags.RESPONSE), int(Flags.RESPONSE_END),
                                           int(Flags.SYSTEM_ERROR))


class FramingLost(FrameTooLarge):
    """A frame whose end cannot be trusted (a length under 16) or that must not be buffered
    (past the limit): the connection ends. A FrameTooLarge, so the transport treats it as every
    protocol's framing error."""

    def __init__(self, reason: str, size: int = 0, limit: int = 0) -> None:
        super().__init__(size, limit)
        self.args = (reason,)
        self.reason = reason


class Malformed(ValueError):
    """A frame whose length is sound but whose content is not (unknown header format, a header
    longer than the frame, a header FlatBuffers cannot read): answered with a system error."""


@dataclass(frozen=True, slots=True)
class Frame:
    opcode: int
    flags: int
    stream_id: int
    header: bytes | memoryview
    payload: bytes | memoryview = b""

    # plain ints: an IntFlag's & runs the enum machinery, a microsecond per frame
    @property
    def is_response(self) -> bool:
        return bool(self.flags & _RESPONSE)

    @property
    def is_end(self) -> bool:
        return bool(self.flags & _RESPONSE_END)

    @property
    def is_system_error(self) -> bool:
        return bool(self.flags & _SYSTEM_ERROR)


class SbpSplitter(Splitter):
    """SBP frames, each handed out whole (its length field included): the shared splitter
    (wire/framing.py) told SBP's length field. A length under 16 or past ``max_size``
    raises FramingLost before anything is buffered."""

    __slots__ = ()

    def __init__(self, max_size: int = DEFAULT_MAX_FRAME) -> None:
        super().__init__(max_size, 4)

    def measure(self, buf: bytes | memoryview, pos: int = 0) -> int | None:
        if len(buf) - pos < 4:
            return None
        need = int(_LENGTH.unpack_from(buf, pos)[0])
        if need < PREFIX_SIZE:
            raise FramingLost(f"a frame length of {need} (at least {PREFIX_SIZE})", need)
        if self.max_size and need > self.max_size:
            raise FramingLost(f"a frame of {need} bytes exceeds the limit of {self.max_size}",
                              need, self.max_size)
        return need


def decode(frame: bytes | memoryview) -> Frame | None:
    """One whole frame as SbpSplitter cut it. None for a frame to discard unanswered (a wrong
    magic or an unknown opcode, as the specification says); Malformed for one whose extended
    header cannot be read."""
    if len(frame) < PREFIX_SIZE:
        raise Malformed(f"a frame of {len(frame)} bytes")
    length, magic, opcode, flags, stream_id, fmt = PREFIX.unpack_from(frame, 0)
    if magic != MAGIC or opcode not in OPCODES:
        return None
    if length != len(frame):
        raise Malformed(f"a frame of {len(frame)} bytes says {length}")
    if fmt != FORMAT_FLATBUFFERS:
        raise Malformed(f"extended header format {fmt:#04x} (only 0x01, FlatBuffers)")
    size = int.from_bytes(frame[13:16], "big")
    if PREFIX_SIZE + size > length:
        raise Malformed(f"an extended header of {size} bytes in a frame of {length}")
    view = memoryview(frame)
    return Frame(opcode, flags, stream_id, view[PREFIX_SIZE : PREFIX_SIZE + size],
                 view[PREFIX_SIZE + size :])


def head(opcode: int, flags: int, stream_id: int, header_size: int, payload_size: int) -> bytes:
    """A frame's first 16 bytes: what comes before its extended header."""
    if header_size > MAX_HEADER:
        raise ValueError(f"an extended header of {header_size} bytes (at most {MAX_HEADER})")
    return PREFIX.pack(PREFIX_SIZE + header_size + payload_size, MAGIC, opcode, flags,
                       stream_id, FORMAT_FLATBUFFERS) + header_size.to_bytes(3, "big")


def encode(opcode: int, flags: int, stream_id: int, header: bytes = b"",
           payload: bytes | memoryview = b"") -> bytes:
    """A whole frame's bytes (``opcode`` any u16: tests send unknown ones)."""
    return b"".join((head(opcode, flags, stream_id, len(header), len(payload)), header, payload))
