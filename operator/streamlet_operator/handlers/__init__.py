"""kopf handlers. Importing this package registers them (kopf's default registry)."""

from . import broker, lifecycle, replication, stream

__all__ = ["broker", "lifecycle", "replication", "stream"]
