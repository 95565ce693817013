"""The Streaming Batch Protocol (docs/protocols/sbp.md): frames, their splitter, the FlatBuffers
extended headers (schema/sbp.fbs, generated into fbs/) and stream ids. No sockets, no files."""

from .frame import (
    DEFAULT_MAX_FRAME,
    LAST,
    MAGIC,
    PREFIX_SIZE,
    Flags,
    Frame,
    FramingLost,
    Malformed,
    Opcode,
    SbpSplitter,
    decode,
    encode,
)
from .headers import ErrorCode, read, request_class, response_class, status, system_error, write
from .ids import stream_id

__all__ = [
    "DEFAULT_MAX_FRAME", "LAST", "MAGIC", "PREFIX_SIZE", "ErrorCode", "Flags", "Frame",
    "FramingLost", "Malformed", "Opcode", "SbpSplitter", "decode", "encode", "read",
    "request_class", "response_class", "status", "stream_id", "system_error", "write",
]
