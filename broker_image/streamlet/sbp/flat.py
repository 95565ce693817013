"""FlatBuffers by hand for the three tables on SBP's hot path: APPEND's request (one AppendInfo
per record batch) and the APPEND and FETCH answers (one result per batch). The generated object
API costs several microseconds per table, more than storing a 100-byte batch; these cost one
struct call per table. Everything else goes through headers.py's ``read``/``write``.

Reading checks every position it follows (a bad offset is Malformed, never an IndexError or a
wrong field); writing lays the buffer out front to back: vtables first, then the root table,
the vector, the results, and one Status table (code NONE) that every result points to (a
FlatBuffers buffer is a DAG: shared tables are allowed).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from operator import add, itemgetter

from .frame import Malformed

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_VT = struct.Struct("<HH")


def _vtable(buf: bytes, table: int) -> tuple[int, int]:
    """The position and size of ``table``'s vtable."""
    if table < 0 or table + 4 > len(buf):
        raise Malformed(f"a table at {table} outside the header's {len(buf)} bytes")
    vt = table - _I32.unpack_from(buf, table)[0]
    if vt < 0 or vt + 4 > len(buf):
        raise Malformed(f"a vtable at {vt} outside the header's {len(buf)} bytes")
    size = _VT.unpack_from(buf, vt)[0]
    if size < 4 or size & 1 or vt + size > len(buf):
        raise Malformed(f"a vtable of {size} bytes at {vt}")
    return vt, size


def _field(buf: bytes, table: int, slot: int) -> int:
    """The offset of field ``slot`` in ``table`` (0: absent)."""
    vt, size = _vtable(buf, table)
    at = 4 + 2 * slot
    return _U16.unpack_from(buf, vt + at)[0] if at + 2 <= size else 0


def root(buf: bytes) -> int:
    if len(buf) < 8:
        raise Malformed(f"an extended header of {len(buf)} bytes")
    return _U32.unpack_from(buf, 0)[0]


def table_vector(buf: bytes, table: int, slot: int) -> list[int]:
    """The positions of the tables of the vector in field ``slot`` of ``table``."""
    off = _field(buf, table, slot)
    if not off:
        return []
    at = table + off
    if at + 4 > len(buf):
        raise Malformed(f"a vector offset at {at} outside the header")
    vec = at + _U32.unpack_from(buf, at)[0]
    if vec + 4 > len(buf):
        raise Malformed(f"a vector at {vec} outside the header")
    n = _U32.unpack_from(buf, vec)[0]
    if vec + 4 + 4 * n > len(buf):
        raise Malformed(f"a vector of {n} tables at {vec} in a header of {len(buf)} bytes")
    elems = struct.unpack_from(f"<{n}I", buf, vec + 4)
    return list(map(add, range(vec + 4, vec + 4 + 4 * n, 4), elems))


class Scalars:
    """Reads some scalar fields of many tables of one type: one struct call per table, its
    layout worked out once per distinct vtable. ``spec``: (slot, struct code, default)."""

    __slots__ = ("defaults", "spec")

    def __init__(self, *spec: tuple[int, str, int]) -> None:
        assert len(spec) > 1  # itemgetter of one index gives a value, not a tuple
        self.spec = spec
        self.defaults = tuple(d for _, _, d in spec)

    def _layout(self, buf: bytes, vt: int, vt_size: int) -> tuple[struct.Struct, itemgetter[tuple[int, ...]]]:
        present = []
        for i, (slot, code, _) in enumerate(self.spec):
            at = 4 + 2 * slot
            off = _U16.unpack_from(buf, vt + at)[0] if at + 2 <= vt_size else 0
            if off:
                present.append((off, code, i))
        present.sort()
        fmt, pos = ["<i"], 4
        # absent fields come from the defaults, after the soffset and the present fields
        where = [len(present) + 1 + i for i in range(len(self.spec))]
        for n, (off, code, i) in enumerate(present):
            if off < pos:
                raise Malformed(f"overlapping fields at {off} in a table")
            fmt.append(f"{off - pos}x{code}")
            pos = off + struct.calcsize(code)
            where[i] = n + 1
        # itemgetter over (soffset, fields..., defaults...): one C call picks them
        pick = itemgetter(*where)
        return struct.Struct("".join(fmt)), pick

    def rows(self, buf: bytes, tables: list[int]) -> list[tuple[int, ...]]:
        """The fields of each table, in ``spec``'s order (a default where absent)."""
        layouts: dict[int, tuple[struct.Struct, itemgetter[tuple[int, ...]]]] = {}
        out = []
        defaults = self.defaults
        last_vt, last = -1, None
        try:
            for t in tables:
                if last is not None and t >= 0:
                    try:  # the last table's layout, if this one shares its vtable
                        vals = last[0].unpack_from(buf, t)
                    except struct.error:  # a smaller table near the end: the exact path
                        vals = (None,)
                    if vals[0] is not None and t - vals[0] == last_vt:
                        out.append(last[1](vals + defaults))
                        continue
                vt, size = _vtable(buf, t)
                got = layouts.get(vt)
                if got is None:
                    got = layouts[vt] = self._layout(buf, vt, size)
                last_vt, last = vt, got
                out.append(got[1](got[0].unpack_from(buf, t) + defaults))
        except struct.error as e:
            raise Malformed(f"a table past the end of its header ({e})") from None
        return out


# --- APPEND's request --------------------------------------------------------------------------

#: AppendInfo: stream_id (slot 0, long), request_index (1, int), batch_length (2, int)
_APPEND_INFO = Scalars((0, "q", 0), (1, "i", 0), (2, "i", 0))


def append_infos(header: bytes | memoryview) -> list[tuple[int, int, int]]:
    """An AppendRequest's (stream id, request index, batch length), in request order. An empty
    header is the table with every field at its default (as headers.read has it): none."""
    buf = bytes(header)
    if not buf:
        return []
    return _APPEND_INFO.rows(buf, table_vector(buf, root(buf), 1))  # type: ignore[return-value]


# --- the answers ---------------------------------------------------------------------------------

# Both answers are {throttle_time_ms: int, status: Status, <results>: [Result]}; their root
# table and its vtable are laid out alike. Status is {code: short, message, detail}: an empty
# table (every field at its default) says NONE.
_ROOT_VT = struct.pack("<HHHHH2x", 10, 16, 4, 8, 12)  # at 4: slots throttle, status, vector
_STATUS_VT = struct.pack("<HH", 4, 4)
_HEAD = struct.Struct("<I12s")  # the root offset, the root vtable
_ROOT = struct.Struct("<iiIII")  # soffset, throttle, status offset, vector offset, the length

#: AppendResult at 40 bytes: soffset, request_index, stream_id, base_offset, append time, status
_APPEND_VT = struct.pack("<HHHHHHH2x", 14, 40, 8, 4, 16, 24, 32)
_APPEND_RESULT = struct.Struct("<iiqqqI4x")
#: FetchResult at 32 bytes: soffset, request_index, stream_id, batch_length, status, base_offset
_FETCH_VT = struct.pack("<HHHHHHH2x", 14, 32, 8, 4, 16, 20, 24)
_FETCH_RESULT = struct.Struct("<iiqiIq")


def _frame(result_vt: bytes, size: int, n: int) -> tuple[bytearray, int, int]:
    """The buffer for ``n`` results of ``size`` bytes with all but the results written: root
    offset, root vtable (at 4), result vtable (16), status vtable (32), root table (40), vector
    (56), results (8-aligned, at ``first``), the shared Status table (at ``status``)."""
    first = (60 + 4 * n + 7) & ~7
    status = first + size * n
    buf = bytearray(status + 4)
    _HEAD.pack_into(buf, 0, 40, _ROOT_VT)
    buf[16:32] = result_vt
    buf[32:36] = _STATUS_VT
    _ROOT.pack_into(buf, 40, 40 - 4, 0, status - 48, 56 - 52, n)
    if n:  # element i at 60 + 4i points to the result at first + size * i
        struct.pack_into(f"<{n}I", buf, 60, *range(first - 60, first - 60 + (size - 4) * n,
                                                     size - 4))
    _I32.pack_into(buf, status, status - 32)
    return buf, first, status


def append_response(runs: list[tuple[list[int], int, int, int]]) -> bytes:
    """An AppendResponse, every result NONE, from runs of batches with consecutive offsets:
    (request indexes, stream id, the first's offset, append time ms)."""
    buf, at, status = _frame(_APPEND_VT, 40, sum(len(r[0]) for r in runs))
    pack = _APPEND_RESULT.pack_into
    for indexes, sid, offset, ms in runs:
        for idx in indexes:
            pack(buf, at, at - 16, idx, sid, offset, ms, status - at - 32)
            at += 40
            offset += 1
    return bytes(buf)


def fetch_response(streams: Sequence[tuple[int, int, Sequence[tuple[int, bytes | memoryview]]]]
                   ) -> bytes:
    """A FetchResponse, every result NONE: per (request index, stream id, its (offset, batch)
    records) a result per record, or one empty result (length 0, offset -1) if it has none."""
    buf, at, status = _frame(_FETCH_VT, 32, sum(len(r) or 1 for _, _, r in streams))
    pack = _FETCH_RESULT.pack_into
    for idx, sid, records in streams:
        if not records:
            pack(buf, at, at - 16, idx, sid, 0, status - at - 20, -1)
            at += 32
        for off, body in records:
            pack(buf, at, at - 16, idx, sid, len(body), status - at - 20, off)
            at += 32
    return bytes(buf)
