"""The RabbitMQ Stream wire protocol: frames, commands, chunks. No sockets, no files."""

from .chunk import ChunkHeader, iter_entries, iter_records
from .constants import Code, Key, OffsetType
from .frames import Command, FrameError, decode, encode
from .framing import FrameSplitter, FrameTooLarge

__all__ = [
    "ChunkHeader", "Code", "Command", "FrameError", "FrameSplitter", "FrameTooLarge", "Key",
    "OffsetType", "decode", "encode", "iter_entries", "iter_records",
]
