"""A batch of messages to append: what a protocol adapter hands a stream, as two blobs (the
publishing ids packed, the entries joined exactly as a chunk stores them), so the hot path makes
no per-message objects. The RabbitMQ adapter builds one straight from a Publish frame
(rabbitmq/publish.py); any protocol can build one from its own messages.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..storage.entries import simple_prefix

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_SUB_BATCH = struct.Struct(">BHII")


def _entry_at(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The size in bytes and the record count of the stored entry at ``data[pos:]``: a simple
    entry (size-prefixed record) or a sub-entry batch (flag bit, count, lengths, records)."""
    if data[pos] & 0x80 == 0:
        return 4 + _U32.unpack_from(data, pos)[0], 1
    _, records, _, length = _SUB_BATCH.unpack_from(data, pos)
    return _SUB_BATCH.size + length, records


@dataclass(slots=True)
class PublishBatch:
    """Messages of one publisher, in publishing-id order as sent."""

    publisher_id: int
    count: int
    #: the publishing ids packed as big-endian u64s: a PublishConfirm's id array as is
    ids: bytes
    #: the entries joined, each as stored: a chunk's data as is (a view of the frame it came in
    #: when it arrived so: SBP's length-prefixed APPEND)
    data: bytes | memoryview
    num_records: int
    first_id: int
    last_id: int
    #: ids strictly increasing within the frame (then deduplication needs no per-message work)
    increasing: bool
    filter_values: list[str | None] | None = None  # Publish v2 only
    #: every entry a simple one (no sub-entry batch), as its maker knows (SBP joins them so,
    #: a Publish frame's split sees it); None: not known, the stream walks the entries. The
    #: chunk's ChunkRef.simple (SBP's FETCH sends such chunks from the file)
    simple: bool | None = None

    def messages(self) -> list[tuple[int, bytes, int]]:
        """``(publishing id, entry, records)`` per message: the slow path, for deduplication
        of a frame that is partly a duplicate."""
        ids = struct.unpack(f">{self.count}Q", self.ids)
        out = []
        data, pos = self.data, 0
        for pid in ids:
            size, records = _entry_at(data, pos)
            out.append((pid, bytes(data[pos : pos + size]), records))
            pos += size
        return out

    def cut(self, max_entries: int, max_bytes: int) -> tuple[PublishBatch, PublishBatch | None]:
        """The first messages of this batch, at most ``max_entries`` of them holding at most
        ``max_bytes`` of entries (but at least one), and the rest (None if nothing is left)."""
        data, pos, records, n = self.data, 0, 0, 0
        if self.simple:  # an entry a record: the walk in C
            n, pos = simple_prefix(data, min(max_entries, self.count), max_bytes)
            records = n
        else:
            while n < min(max_entries, self.count):
                size, k = _entry_at(data, pos)
                if n and pos + size > max_bytes:
                    break
                pos, records, n = pos + size, records + k, n + 1
        if n == self.count:
            return self, None
        return (self._part(0, n, 0, pos, records),
                self._part(n, self.count, pos, len(data), self.num_records - records))

    def _part(self, i: int, j: int, p: int, q: int, records: int) -> PublishBatch:
        """Messages ``i`` to ``j`` (exclusive), whose entries are ``data[p:q]``."""
        ids = self.ids[8 * i : 8 * j]
        first, last = _U64.unpack_from(ids, 0)[0], _U64.unpack_from(ids, len(ids) - 8)[0]
        increasing = self.increasing
        if not increasing:
            seq = struct.unpack(f">{j - i}Q", ids)
            increasing = all(a < b for a, b in zip(seq, seq[1:], strict=False))
        return PublishBatch(self.publisher_id, j - i, ids, self.data[p:q], records, first,
                            last, increasing,
                            self.filter_values[i:j] if self.filter_values is not None else None,
                            True if self.simple else None)
