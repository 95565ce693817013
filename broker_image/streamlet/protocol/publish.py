"""The broker's fast path for Publish frames: no per-message objects.

A Publish body is ``PublisherId u8, Count i32`` then per message ``PublishingId u64``,
(v2: ``FilterValue string``), and the entry exactly as Osiris stores it. So a chunk's data is
the frame's entries with the publishing ids (and filter values) cut out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .wire import Malformed

_PID_COUNT = struct.Struct(">Bi")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_SUB_BATCH = struct.Struct(">BHII")


@dataclass(slots=True)
class PublishBatch:
    publisher_id: int
    publishing_ids: list[int]
    #: entries to store, one per message, each as stored (header included)
    entries: list[memoryview]
    #: records per message: 1, or NumRecords of a sub-entry batch
    records: list[int]
    filter_values: list[str | None] | None  # v2 only
    total_records: int = 0
    total_bytes: int = 0


def parse_publish(body: memoryview, version: int) -> PublishBatch:
    """Split a Publish body (after key and version). Raises Malformed."""
    if len(body) < 5:
        raise Malformed("truncated publish")
    pid, count = _PID_COUNT.unpack_from(body, 0)
    end = len(body)
    if count < 0 or count * 12 > end:
        raise Malformed(f"bad message count {count}")
    ids: list[int] = []
    entries: list[memoryview] = []
    records: list[int] = []
    filters: list[str | None] | None = [] if version >= 2 else None
    pos = 5
    all_simple = True
    total_bytes = 0
    u64, u32 = _U64.unpack_from, _U32.unpack_from
    try:
        for _ in range(count):
            ids.append(u64(body, pos)[0])
            pos += 8
            if filters is not None:
                n = _I16.unpack_from(body, pos)[0]
                pos += 2
                if n >= 0:
                    filters.append(bytes(body[pos : pos + n]).decode("utf-8"))
                    pos += n
                else:
                    filters.append(None)
            head = body[pos]
            if head & 0x80 == 0:
                size = 4 + u32(body, pos)[0]
                records.append(1)
            else:
                _, n_records, _, length = _SUB_BATCH.unpack_from(body, pos)
                size = _SUB_BATCH.size + length
                records.append(n_records)
                all_simple = False
            if pos + size > end:
                raise Malformed("truncated message")
            entries.append(body[pos : pos + size])
            total_bytes += size
            pos += size
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise Malformed(f"truncated publish: {e}") from e
    if pos != end:
        raise Malformed(f"{end - pos} unexpected bytes after publish")
    n_records = len(records) if len(records) == count and all_simple else sum(records)
    return PublishBatch(pid, ids, entries, records, filters, n_records, total_bytes)


_CONFIRM_HEAD = struct.Struct(">IHHBi")


def encode_confirm(publisher_id: int, ids: list[int]) -> bytes:
    """A whole PublishConfirm frame, built in one pack."""
    n = len(ids)
    return _CONFIRM_HEAD.pack(9 + 8 * n, 3, 1, publisher_id, n) + struct.pack(f">{n}Q", *ids)


_DELIVER_V1 = struct.Struct(">IHHB")
_DELIVER_V2 = struct.Struct(">IHHBQ")


def deliver_prefix(subscription_id: int, chunk_size: int, committed: int | None = None) -> bytes:
    """The frame header of a Deliver carrying ``chunk_size`` bytes of header+data.

    v1 when ``committed`` is None, else v2 with the committed chunk id."""
    if committed is None:
        return _DELIVER_V1.pack(5 + chunk_size, 8, 1, subscription_id)
    return _DELIVER_V2.pack(13 + chunk_size, 8, 2, subscription_id, committed)
