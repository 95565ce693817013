"""The broker's fast path for Publish frames: no per-message objects.

A Publish body is ``PublisherId u8, Count i32`` then per message ``PublishingId u64``,
(v2: ``FilterValue string``), and the entry exactly as Osiris stores it. So a chunk's data is
the frame's entries with the publishing ids (and filter values) cut out. Every client side
(the client's producer, perf, bench, tests) builds its Publish frames with :func:`publish_frame`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from ..native import allowed
from .constants import Key
from .fields import Malformed, string

#: A Publish body split, in the field order of the core's PublishBatch: publisher id, count,
#: the publishing ids packed, the entries joined, records, first id, last id, ids increasing,
#: filter values (v2), every entry simple. The adapter makes the batch of it, one call a frame
#: (``PublishBatch(*split)``), so the codec names no core type.
PublishSplit = tuple[int, int, bytes, bytes | memoryview, int, int, int, bool,
                     list[str | None] | None, bool]

_PID_COUNT = struct.Struct(">Bi")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_SUB_BATCH = struct.Struct(">BHII")


def _split_python(body: bytes | memoryview, version: int) -> PublishSplit:
    """Walk the frame once; the reference implementation of _speedups.split_publish_v1."""
    if len(body) < 5:
        raise Malformed("truncated publish")
    pid, count = _PID_COUNT.unpack_from(body, 0)
    end = len(body)
    if count < 0 or count * 12 > end - 5:
        raise Malformed(f"bad message count {count}")
    ids: list[bytes | memoryview] = []
    entries: list[bytes | memoryview] = []
    filters: list[str | None] | None = [] if version >= 2 else None
    records = 0
    batched = False
    increasing = True
    prev = -1
    pos = 5
    u32 = _U32.unpack_from
    try:
        for _ in range(count):
            if end - pos < 9:
                raise Malformed(f"truncated message at byte {pos}")
            raw_id = body[pos : pos + 8]
            ids.append(raw_id)
            pid_value = _U64.unpack_from(raw_id)[0]
            if pid_value <= prev:
                increasing = False
            prev = pid_value
            pos += 8
            if filters is not None:
                n = _I16.unpack_from(body, pos)[0]
                pos += 2
                if n >= 0:
                    filters.append(bytes(body[pos : pos + n]).decode("utf-8"))
                    pos += n
                else:
                    filters.append(None)
            if body[pos] & 0x80 == 0:
                size = 4 + u32(body, pos)[0]
                records += 1
            else:
                _, n_records, _, length = _SUB_BATCH.unpack_from(body, pos)
                size = _SUB_BATCH.size + length
                records += n_records
                batched = True
            if size > end - pos:
                raise Malformed(f"truncated entry at byte {pos}")
            entries.append(body[pos : pos + size])
            pos += size
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise Malformed(f"truncated publish: {e}") from e
    if pos != end:
        raise Malformed(f"{end - pos} unexpected bytes after publish")
    packed = b"".join(ids)
    first = _U64.unpack_from(packed)[0] if count else 0
    return (pid, count, packed, b"".join(entries), records, first, prev if count else 0,
            increasing, filters, not batched)


#: the C split (_speedups.pyi), None where it is not built or turned off
_split_c: Callable[[bytes | memoryview],
                   tuple[int, int, bytes, bytes, int, int, int, bool, None, bool]] | None
try:
    allowed("streamlet.rabbitmq._speedups")
    from ._speedups import split_publish_v1 as _split_c
except ImportError:  # no compiler at install time: the Python path gives the same results
    _split_c = None


def parse_publish(body: bytes | memoryview, version: int) -> PublishSplit:
    """Split a Publish body (after key and version) into PublishBatch's fields. Raises
    Malformed."""
    if version == 1 and _split_c is not None:
        try:
            return _split_c(body)
        except ValueError as e:
            raise Malformed(str(e)) from None
    return _split_python(body, version)


# Size, Key, Version, PublisherId, Count: the 13 bytes before the first message
_PUBLISH_HEAD = struct.Struct(">IHHBi")
_MESSAGE_HEAD = struct.Struct(">QI")  # publishing id, then a simple entry's length
#: bytes before a Publish frame's first message
PUBLISH_HEAD_SIZE = _PUBLISH_HEAD.size
#: bytes before a message's body in a Publish v1 frame (publishing id, simple entry length)
MESSAGE_HEAD_SIZE = _MESSAGE_HEAD.size


def publish_frame(publisher_id: int, messages: Iterable[tuple[int, bytes]],
                  filter_values: Iterable[str | None] | None = None) -> bytes:
    """One whole Publish frame: each (publishing id, body) a simple entry. v1, or v2 with one
    filter value per message when ``filter_values`` is given. One struct call a message and
    one join a frame."""
    pack = _MESSAGE_HEAD.pack
    if filter_values is None:
        parts = [pack(i, len(b)) + b for i, b in messages]
        version = 1
    else:
        u64, u32 = _U64.pack, _U32.pack
        parts = [u64(i) + string(fv) + u32(len(b)) + b
                 for (i, b), fv in zip(messages, filter_values, strict=True)]
        version = 2
    payload = b"".join(parts)
    return _PUBLISH_HEAD.pack(
        PUBLISH_HEAD_SIZE - 4 + len(payload), Key.PUBLISH, version, publisher_id, len(parts)
    ) + payload


def set_publish_head(frame: bytearray, end: int, publisher_id: int, count: int) -> None:
    """Rewrite the head of a v1 frame in ``frame[:end]`` (a template made by
    :func:`publish_frame` whose first ``count`` messages are sent)."""
    _PUBLISH_HEAD.pack_into(frame, 0, end - 4, Key.PUBLISH, 1, publisher_id, count)


_CONFIRM_HEAD = _PUBLISH_HEAD


def encode_confirm(publisher_id: int, packed_ids: list[bytes]) -> bytes:
    """A whole PublishConfirm frame from packed big-endian id arrays (see PublishBatch.ids)."""
    n = sum(len(b) for b in packed_ids) // 8
    return _CONFIRM_HEAD.pack(9 + 8 * n, 3, 1, publisher_id, n) + b"".join(packed_ids)


_DELIVER_V1 = struct.Struct(">IHHB")
_DELIVER_V2 = struct.Struct(">IHHBQ")


def deliver_prefix(subscription_id: int, chunk_size: int, committed: int | None = None) -> bytes:
    """The frame header of a Deliver carrying ``chunk_size`` bytes of header+data.

    v1 when ``committed`` is None, else v2 with the committed chunk id."""
    if committed is None:
        return _DELIVER_V1.pack(5 + chunk_size, 8, 1, subscription_id)
    return _DELIVER_V2.pack(13 + chunk_size, 8, 2, subscription_id, committed)
