"""The durable log of a stream: Osiris segments and indexes, retention, recovery."""

from .config import LogConfig
from .layout import ChunkRef
from .log import StreamLog
from .segment import InvalidChunk, LogAhead, OutOfOrderChunk, StaleEpoch, StorageError

__all__ = ["ChunkRef", "InvalidChunk", "LogAhead", "LogConfig", "OutOfOrderChunk", "StaleEpoch",
           "StorageError", "StreamLog"]
