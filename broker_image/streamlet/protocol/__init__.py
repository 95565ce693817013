"""The RabbitMQ Stream wire protocol: frames and commands. No sockets, no files. (The chunk a
Deliver carries is the storage format: streamlet.storage.chunk.)"""

from .constants import Code, Key, OffsetType
from .frames import Command, FrameError, decode, encode
from .framing import FrameSplitter, FrameTooLarge

__all__ = [
    "Code", "Command", "FrameError", "FrameSplitter", "FrameTooLarge", "Key",
    "OffsetType", "decode", "encode",
]
