"""A chunk's simple entries cut out and joined in bulk, for protocols whose records come and go
without entry headers (SBP: one record batch per simple entry; its APPEND gives the batches'
lengths and their bytes joined, its FETCH answer the same). Written in C (``_entries.c``) where
a compiler was there at install time; this module's Python gives the same results."""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterable
from itertools import accumulate, chain
from typing import NamedTuple

from ..native import allowed
from .chunk import ChunkError

_U32 = struct.Struct(">I")

END, FULL, BATCH = 0, 1, 2


class Cut(NamedTuple):
    first: int  # the offset of the first entry taken, -1 if none
    n: int  # entries taken
    lengths: bytes  # ``count`` native int32: array("i").frombytes reads them (joined only)
    #: joined: the bodies without their headers; else the entries taken as they are in
    #: ``data`` (each behind its 4-byte length): a view of it, not a copy
    bodies: bytes | memoryview
    size: int  # bytes taken, those before the call included
    stop: int  # END (the data ended), FULL (max_bytes reached), BATCH (a sub-entry batch)
    pos: int  # where the walk stopped: at BATCH, the sub-entry batch's byte
    offset: int  # and its offset


def _cut_python(data: bytes | bytearray | memoryview, offset: int, start: int, max_bytes: int,
                size: int, taken: bool, join: bool = True
                ) -> tuple[int, int, bytes, bytes | memoryview, int, int, int, int]:
    lengths: array[int] = array("i")
    bodies: list[bytes | memoryview] = []
    first, pos, end, stop, at = -1, 0, len(data), END, -1
    mv = memoryview(data)
    u32 = _U32.unpack_from
    while pos < end:
        if mv[pos] & 0x80:
            stop = BATCH
            break
        if end - pos < 4:
            raise ValueError("truncated entry header")
        n = u32(mv, pos)[0]
        if n > end - pos - 4:
            raise ValueError("truncated entry")
        if offset >= start:
            if (taken or lengths) and size + n > max_bytes:
                stop = FULL
                break
            if first < 0:
                first, at = offset, pos
            lengths.append(n)
            bodies.append(mv[pos + 4 : pos + 4 + n])
            size += n
        offset += 1
        pos += 4 + n
    if not join:
        return first, len(lengths), b"", mv[at if at >= 0 else pos : pos], size, stop, pos, offset
    return first, len(lengths), lengths.tobytes(), b"".join(bodies), size, stop, pos, offset


def _join_python(payload: bytes | memoryview, lengths: list[int] | bytes | memoryview) -> bytes:
    if not isinstance(lengths, list):
        if len(lengths) % 4:
            raise ValueError("packed lengths not a whole number of int32")
        lengths = list(struct.unpack(f"<{len(lengths) // 4}i", lengths))
    if any(n < 0 or n >= 0x80000000 for n in lengths) or sum(lengths) != len(payload):
        raise ValueError(f"entries of {sum(lengths)} bytes in a payload of {len(payload)}")
    mv = memoryview(payload)
    ends = list(accumulate(lengths))
    bodies = map(mv.__getitem__, map(slice, chain((0,), ends), ends))
    return b"".join(chain.from_iterable(zip(map(_U32.pack, lengths), bodies, strict=False)))


def _prefix_python(data: bytes | bytearray | memoryview, max_entries: int, max_bytes: int
                   ) -> tuple[int, int]:
    mv = memoryview(data)
    pos, n, end = 0, 0, len(mv)
    while n < max_entries and pos < end:
        if mv[pos] & 0x80 or end - pos < 4:
            raise ValueError("not a simple entry")
        size = 4 + _U32.unpack_from(mv, pos)[0]
        if size > end - pos:
            raise ValueError("truncated entry")
        if n and pos + size > max_bytes:
            break
        pos += size
        n += 1
    return n, pos


def _ids_python(first: int, n: int) -> bytes:
    if n < 0:
        raise ValueError("a negative count")
    return struct.pack(f">{n}Q", *range(first, first + n))


#: the C functions (_entries.pyi), None where they are not built or turned off
_cut_c: Callable[[bytes | bytearray | memoryview, int, int, int, int, bool, bool],
                 tuple[int, int, bytes, bytes | memoryview, int, int, int, int]] | None
_join_c: Callable[[bytes | memoryview, list[int] | bytes | memoryview], bytes] | None
_ids_c: Callable[[int, int], bytes] | None
_prefix_c: Callable[[bytes | bytearray | memoryview, int, int], tuple[int, int]] | None
try:
    allowed("streamlet.storage._entries")
    from ._entries import consecutive_ids as _ids_c
    from ._entries import cut_simple as _cut_c
    from ._entries import join_simple as _join_c
    from ._entries import simple_prefix as _prefix_c
except ImportError:  # no compiler at install time: the Python path gives the same results
    _cut_c = _join_c = _ids_c = _prefix_c = None


def simple_only(data: bytes | bytearray | memoryview, python: bool = False) -> bool:
    """Whether ``data`` is whole simple entries and nothing else (no sub-entry batch, nothing
    cut short): a walk over the entries' headers, no copy."""
    try:
        return cut_simple(data, 0, 0, 1 << 62, 0, False, False, python).stop == END
    except ChunkError:
        return False


def all_simple(parts: Iterable[bytes | bytearray | memoryview], num_entries: int,
               num_records: int) -> bool:
    """Whether entries ``parts`` (``num_entries`` of them holding ``num_records`` records) are
    all simple: no walk when the counts already say a sub-entry batch is there."""
    return num_entries == num_records and all(map(simple_only, parts))


def simple_prefix(data: bytes | bytearray | memoryview, max_entries: int, max_bytes: int,
                  python: bool = False) -> tuple[int, int]:
    """How many of the simple entries at the start of ``data`` a cut takes, at most
    ``max_entries`` within ``max_bytes`` (but at least one), and the bytes they fill: a publish
    batch of simple entries cut to fit a chunk, walked in C. Raises ChunkError at a sub-entry
    batch or an entry cut short."""
    prefix = _prefix_python if python or _prefix_c is None else _prefix_c
    try:
        return prefix(data, max_entries, max_bytes)
    except ValueError as e:
        raise ChunkError(str(e)) from None


def consecutive_ids(first: int, n: int, python: bool = False) -> bytes:
    """Publishing ids ``first``..``first + n - 1``, each a big-endian u64: a publish batch's
    id array (SBP's batches get consecutive ids of their connection)."""
    return (_ids_python if python or _ids_c is None else _ids_c)(first, n)


def join_simple(payload: bytes | memoryview, lengths: list[int] | bytes | memoryview,
                python: bool = False) -> bytes:
    """The bodies of ``payload``, ``lengths`` long, each as a simple entry (its size, its
    bytes): a chunk's data section. ``lengths``: a list, or little-endian int32s packed in a
    buffer (as a FlatBuffers ``[int]`` arrives: SBP's APPEND). Raises ChunkError unless the
    lengths add up to the payload."""
    join = _join_python if python or _join_c is None else _join_c
    try:
        return join(payload, lengths)
    except ValueError as e:
        raise ChunkError(str(e)) from None


def cut_simple(data: bytes | bytearray | memoryview, offset: int, start: int, max_bytes: int,
               size: int = 0, taken: bool = False, join: bool = True,
               python: bool = False) -> Cut:
    """The simple entries of ``data`` (a chunk's data section, its first entry at ``offset``)
    from offset ``start``, while ``size`` plus their bodies' bytes stay within ``max_bytes``
    (the first entry of a read is always taken: ``taken`` says whether an earlier call took
    one). ``join``: their bodies joined and their lengths; else the entries as stored, a view
    of ``data``. Stops at a sub-entry batch (BATCH) for the general reader. Raises ChunkError on
    a truncated entry."""
    cut = _cut_python if python or _cut_c is None else _cut_c
    try:
        return Cut(*cut(data, offset, start, max_bytes, size, taken, join))
    except ValueError as e:
        raise ChunkError(str(e)) from None
