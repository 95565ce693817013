"""The durable log of a stream: Osiris segments and indexes, retention, recovery."""

from .config import LogConfig
from .layout import ChunkRef
from .log import StreamLog
from .segment import StorageError

__all__ = ["ChunkRef", "LogConfig", "StorageError", "StreamLog"]
