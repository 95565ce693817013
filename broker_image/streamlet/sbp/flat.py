"""FlatBuffers by hand for the tables on SBP's hot path: APPEND's request (one AppendInfo per
record batch, or streamlet's AppendRuns) and the APPEND and FETCH answers (one result per
batch, or per run with streamlet's run forms), at one struct call per table or a column at a
time where the layout allows. Everything else goes through headers.py's ``read``/``write``.

Reading checks every position it follows (a bad offset is Malformed, never an IndexError or a
wrong field). Mechanism: docs/protocols/sbp.md#the-extended-headers-flatbuffers.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Sequence
from operator import add, itemgetter, sub
from typing import Any

from ..native import allowed
from .frame import PREFIX_SIZE, Flags, Malformed, Opcode, decode, head

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U8 = struct.Struct("<B")
_VT = struct.Struct("<HH")
#: columns map onto the buffer as native integers: FlatBuffers is little-endian
_NATIVE_LE = sys.byteorder == "little"


def _vtable(buf: bytes, table: int) -> tuple[int, int]:
    """The position and size of ``table``'s vtable."""
    if table < 0 or table + 4 > len(buf):
        raise Malformed(f"a table at {table} outside the header's {len(buf)} bytes")
    vt = table - _I32.unpack_from(buf, table)[0]
    return vt, _vtable_size(buf, vt)


def _vtable_size(buf: bytes, vt: int) -> int:
    if vt < 0 or vt + 4 > len(buf):
        raise Malformed(f"a vtable at {vt} outside the header's {len(buf)} bytes")
    size = _VT.unpack_from(buf, vt)[0]
    if size < 4 or size & 1 or vt + size > len(buf):
        raise Malformed(f"a vtable of {size} bytes at {vt}")
    return size


def _field(buf: bytes, table: int, slot: int) -> int:
    """The offset of field ``slot`` in ``table`` (0: absent)."""
    vt, size = _vtable(buf, table)
    at = 4 + 2 * slot
    return _U16.unpack_from(buf, vt + at)[0] if at + 2 <= size else 0


def root(buf: bytes) -> int:
    if len(buf) < 8:
        raise Malformed(f"an extended header of {len(buf)} bytes")
    return _U32.unpack_from(buf, 0)[0]


def _vector(buf: bytes, table: int, slot: int) -> tuple[int, int]:
    """Where the elements of the vector (of 4-byte elements) in field ``slot`` of ``table``
    start, and how many there are: (0, 0) when the field is absent."""
    off = _field(buf, table, slot)
    if not off:
        return 0, 0
    at = table + off
    if at + 4 > len(buf):
        raise Malformed(f"a vector offset at {at} outside the header")
    vec = at + _U32.unpack_from(buf, at)[0]
    if vec + 4 > len(buf):
        raise Malformed(f"a vector at {vec} outside the header")
    n = _U32.unpack_from(buf, vec)[0]
    if vec + 4 + 4 * n > len(buf):
        raise Malformed(f"a vector of {n} elements at {vec} in a header of {len(buf)} bytes")
    return vec + 4, n


def table_vector(buf: bytes, table: int, slot: int) -> list[int]:
    """The positions of the tables of the vector in field ``slot`` of ``table``."""
    first, n = _vector(buf, table, slot)
    if not n:
        return []
    elems = struct.unpack_from(f"<{n}I", buf, first)
    return list(map(add, range(first, first + 4 * n, 4), elems))


class Scalars:
    """Reads some scalar fields of many tables of one type: one struct call per table, its
    layout worked out once per distinct vtable. ``spec``: (slot, struct code, default)."""

    __slots__ = ("c_spec", "defaults", "known", "spec")

    def __init__(self, *spec: tuple[int, str, int]) -> None:
        assert len(spec) > 1  # itemgetter of one index gives a value, not a tuple
        self.spec = spec
        self.defaults = tuple(d for _, _, d in spec)
        self.c_spec = tuple((slot, struct.calcsize(code), d) for slot, code, d in spec)
        #: a vtable's bytes -> its fields' offsets and the size they span (``_uniform``)
        self.known: dict[bytes, tuple[tuple[int, ...], int]] = {}

    def _offsets(self, buf: bytes, vt: int, vt_size: int) -> list[int]:
        """Each field's offset in a table of vtable ``vt`` (0: absent), in ``spec``'s order."""
        out = []
        for slot, _, _ in self.spec:
            at = 4 + 2 * slot
            out.append(_U16.unpack_from(buf, vt + at)[0] if at + 2 <= vt_size else 0)
        return out

    def _layout(self, buf: bytes, vt: int, vt_size: int) -> tuple[struct.Struct, itemgetter[tuple[int, ...]]]:
        present = []
        for i, ((_, code, _), off) in enumerate(zip(self.spec, self._offsets(buf, vt, vt_size),
                                                    strict=True)):
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

    def read(self, header: bytes | memoryview, vector_slot: int) -> list[list[int]]:
        """``columns`` of the tables in the root table's vector field ``vector_slot``: in C
        (``_flat.read_columns``) where it was built, the same values and refusals."""
        if _read_columns is not None:
            try:
                return list(_read_columns(header, vector_slot, self.c_spec))
            except ValueError as e:
                raise Malformed(str(e)) from None
        buf = bytes(header)
        return self.columns(buf, table_vector(buf, root(buf), vector_slot))

    def summary(self, header: bytes | memoryview, vector_slot: int
                ) -> tuple[int, list[tuple[int, int, int, bool]]]:
        """``read`` for a reader that only checks and counts: the number of tables, and per
        field (first, last, sum, consecutive: each value the one before plus 1), with no object
        made per table where the C reader was built."""
        if _read_columns is not None:
            try:
                n, stats = _read_columns(header, vector_slot, self.c_spec, True)
            except ValueError as e:
                raise Malformed(str(e)) from None
            return n, list(stats)
        cols = self.read(header, vector_slot)
        n = len(cols[0])
        return n, [(c[0] if c else 0, c[-1] if c else 0, _wrap64(sum(c)),
                    all(b == a + 1 for a, b in zip(c, c[1:], strict=False))) for c in cols]

    def columns(self, buf: bytes, tables: list[int]) -> list[list[int]]:
        """The fields of the tables, a list per field in ``spec``'s order: ``rows`` turned
        round, read a column per C call when the tables are evenly spaced and share one vtable
        (as streamlet's writers and FlatBuffers' builder lay out tables of one type)."""
        n = len(tables)
        got = self._uniform(buf, tables) if n > 1 and _NATIVE_LE else None
        if got is not None:
            return got
        rows = self.rows(buf, tables)
        return [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in self.spec]

    def _uniform(self, buf: bytes, tables: list[int]) -> list[list[int]] | None:
        """``columns`` by strided views: None unless the tables are evenly spaced (either way
        round: FlatBuffers' builder writes back to front) and all of one layout."""
        n = len(tables)
        low, stride = tables[0], tables[1] - tables[0]
        if stride < 0:
            low, stride = tables[-1], -stride
        if not stride or stride & 3 or low < 0 or tables != list(
                range(tables[0], tables[0] + (tables[1] - tables[0]) * n, tables[1] - tables[0])):
            return None
        backwards = tables[0] != low
        mv = memoryview(buf)
        soffsets = _strided(mv, low, stride, n, "i", 4)
        if soffsets is None:
            return None
        layouts = set()
        for vt in set(map(sub, range(low, low + stride * n, stride), soffsets)):
            vt_size = _vtable_size(buf, vt)
            key = buf[vt : vt + vt_size]
            got = self.known.get(key)
            if got is None:
                if len(self.known) > 64:  # a client writing ever new vtables: no memory leak
                    self.known.clear()
                got = self.known[key] = (tuple(self._offsets(buf, vt, vt_size)),
                                         self._layout(buf, vt, vt_size)[0].size)  # checks overlaps
            layouts.add(got)
            if len(layouts) > 1:
                return None
        offsets, size = layouts.pop()
        if low + stride * (n - 1) + size > len(buf):
            raise Malformed("a table past the end of its header")
        out = []
        for (_, code, default), off in zip(self.spec, offsets, strict=True):
            if not off:
                out.append([default] * n)
                continue
            col = _strided(mv, low + off, stride, n, code, struct.calcsize(code))
            if col is None:
                return None
            out.append(col[::-1] if backwards else col)
        return out

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


def _wrap64(v: int) -> int:
    """``v`` as a signed 64-bit sum wraps (the C reader's)."""
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


def _strided(mv: memoryview, start: int, stride: int, n: int, code: str, size: int
             ) -> list[int] | None:
    """The ``n`` integers of type ``code`` at ``start``, ``start + stride``, ...: None where a
    strided view cannot read them (a stride not a multiple of their size, past the end)."""
    end = start + stride * (n - 1) + size
    if stride % size or start < 0 or end > len(mv):
        return None
    return mv[start:end].cast(code)[:: stride // size].tolist()  # type: ignore[call-overload, no-any-return]


# --- APPEND's request --------------------------------------------------------------------------

#: AppendInfo: stream_id (slot 0, long), request_index (1, int), batch_length (2, int)
_APPEND_INFO = Scalars((0, "q", 0), (1, "i", 0), (2, "i", 0))
#: AppendRequest's append_requests: the vector of AppendInfo tables (slot 1)
_INFOS_SLOT = 1


def append_columns(header: bytes | memoryview) -> tuple[list[int], list[int], list[int]]:
    """An AppendRequest's stream ids, request indexes and batch lengths, in request order. An
    empty header is the table with every field at its default (as headers.read has it): none."""
    if not header:
        return [], [], []
    ids, indexes, lengths = _APPEND_INFO.read(header, _INFOS_SLOT)
    return ids, indexes, lengths


_I64 = struct.Struct("<q")
#: AppendRequest's append_runs (slot 2, streamlet's); AppendRun: stream_id (0), request_index
#: (1), batch_lengths (2), batch_count (3)
_RUNS_SLOT = 2
#: AppendRequest's length_prefixed (slot 3, streamlet's, a bool)
_PREFIXED_SLOT = 3
_BE32 = struct.Struct(">I")


def append_runs(header: bytes | memoryview, python: bool = False
                ) -> list[tuple[int, int, list[int], int]] | None:
    """An AppendRequest's runs (streamlet's): (stream id, first request index, batch lengths,
    batch count) each, in request order; None when it has no ``append_runs`` field (the
    document's form). In C (``_flat.read_runs``) where it was built: the same values and
    refusals."""
    if _read_runs is not None and not python:
        try:
            return _read_runs(header, _RUNS_SLOT)
        except ValueError as e:
            raise Malformed(str(e)) from None
    buf = bytes(header)
    if not buf or not _field(buf, root(buf), _RUNS_SLOT):
        return None
    out = []
    for t in table_vector(buf, root(buf), _RUNS_SLOT):
        sid, idx = _scalar(buf, t, 0, _I64, 0), _scalar(buf, t, 1, _I32, 0)
        out.append((sid, idx, _ints(buf, t, 2), _scalar(buf, t, 3, _I32, 0)))
    return out


def append_prefixed(header: bytes | memoryview) -> bool:
    """Whether an AppendRequest says ``length_prefixed`` (each batch in the payload behind its
    length)."""
    buf = bytes(header)
    return bool(buf) and bool(_scalar(buf, root(buf), _PREFIXED_SLOT, _U8, 0))


def prefixed_lengths(payload: bytes | memoryview, count: int, at: int = 0
                     ) -> tuple[list[int], int]:
    """The lengths of ``count`` batches each behind its length (uint32, big-endian) in
    ``payload`` from ``at``, and where the last ends. Malformed when one is cut short or says
    2**31 bytes or more (a FlatBuffers ``int`` length cannot)."""
    lengths = []
    for _ in range(count):
        if len(payload) - at < 4:
            raise Malformed(f"a batch length cut short at byte {at} of the payload")
        n = _BE32.unpack_from(payload, at)[0]
        if n > 0x7FFF_FFFF or len(payload) - at - 4 < n:
            raise Malformed(f"a batch of {n} bytes at byte {at} of a payload of {len(payload)}")
        lengths.append(n)
        at += 4 + n
    return lengths, at


#: (frame stream identifier, stream_id, request_index, batch count, where the lengths are,
#: where the payload is): append_run's answer
UsualAppend = tuple[int, int, int, int, int, int]
#: append_run's lengths_at when each batch's length is in the payload, before it
PREFIXED = -1


def append_run(frame: bytes | memoryview, python: bool = False) -> UsualAppend | None:
    """A whole APPEND frame read at once when it is the usual one: a request whose header has
    exactly one AppendRun (no AppendInfo) of at least one batch, the lengths none negative and
    adding up to the payload. The lengths are ``count`` little-endian int32 at ``lengths_at``
    in ``frame``, or with ``length_prefixed`` (``lengths_at`` PREFIXED) each before its batch
    in the payload, ``batch_count`` of them and no ``batch_lengths``; the payload is from
    ``payload_at`` to the frame's end. None for any other frame, which the general path
    (decode, ``append_runs``) reads and answers. In C (``_flat.append_run``) where it was
    built: the same answers."""
    if _append_run is not None and not python:
        return _append_run(frame)
    try:
        f = decode(frame)
        if f is None or f.opcode != Opcode.APPEND or f.is_response:
            return None
        buf = bytes(f.header)
        top = root(buf)
        tables = table_vector(buf, top, _RUNS_SLOT)
        if _vector(buf, top, _INFOS_SLOT)[1] or len(tables) != 1:
            return None
        prefixed = _scalar(buf, top, _PREFIXED_SLOT, _U8, 0)
        t = tables[0]
        sid, idx = _scalar(buf, t, 0, _I64, 0), _scalar(buf, t, 1, _I32, 0)
        has_lengths, has_count = _field(buf, t, 2), _field(buf, t, 3)
        n = _scalar(buf, t, 3, _I32, 0)
        if prefixed:
            if has_lengths or n <= 0 or prefixed_lengths(f.payload, n)[1] != len(f.payload):
                return None
            return f.stream_id, sid, idx, n, PREFIXED, len(frame) - len(f.payload)
        if has_count:
            return None
        at, n = _vector(buf, t, 2)
        lengths = struct.unpack_from(f"<{n}i", buf, at)
    except Malformed:
        return None
    payload = len(f.payload)
    if not n or min(lengths) < 0 or sum(lengths) != payload:
        return None
    return f.stream_id, sid, idx, n, PREFIX_SIZE + at, len(frame) - payload


def _scalar(buf: bytes, table: int, slot: int, kind: struct.Struct, default: int) -> int:
    off = _field(buf, table, slot)
    if not off:
        return default
    if table + off + kind.size > len(buf):
        raise Malformed(f"a field at {table + off} outside the header")
    return int(kind.unpack_from(buf, table + off)[0])


def _ints(buf: bytes, table: int, slot: int) -> list[int]:
    """The int32 vector in field ``slot`` of ``table`` (empty when absent)."""
    first, n = _vector(buf, table, slot)
    return list(struct.unpack_from(f"<{n}i", buf, first)) if n else []


def append_infos(header: bytes | memoryview) -> list[tuple[int, int, int]]:
    """``append_columns`` as (stream id, request index, batch length) per batch."""
    return list(zip(*append_columns(header), strict=True))


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
#: the same with batch_count (streamlet's) in the padding at 36
_APPEND_RUN_VT = struct.pack("<HHHHHHHH", 16, 40, 8, 4, 16, 24, 32, 36)
_APPEND_RUN = struct.Struct("<iiqqqIi")
#: FetchResult at 32 bytes: soffset, request_index, stream_id, batch_length, status, base_offset
_FETCH_VT = struct.pack("<HHHHHHH2x", 14, 32, 8, 4, 16, 20, 24)
_FETCH_RESULT = struct.Struct("<iiqiIq")


#: FetchResult with batch_lengths (run_results) at 40 bytes: soffset, request_index, stream_id,
#: batch_length, status, base_offset, batch_lengths, padding
_FETCH_RUN_VT = struct.pack("<HHHHHHHH", 16, 40, 8, 4, 16, 20, 24, 32)
_FETCH_RUN = struct.Struct("<iiqiIqI4x")


def _frame(result_vt: bytes, size: int, n: int) -> tuple[bytearray, int, int]:
    """The buffer for ``n`` results of ``size`` bytes with all but the results and the vector's
    elements written (``fill_*`` write those): root offset, root vtable (at 4), result vtable
    (16), status vtable (32), root table (40), vector (56), results (8-aligned, at ``first``),
    the shared Status table (at ``status``)."""
    first = (60 + 4 * n + 7) & ~7
    status = first + size * n
    buf = bytearray(status + 4)
    _HEAD.pack_into(buf, 0, 40, _ROOT_VT)
    buf[16:32] = result_vt
    buf[32:36] = _STATUS_VT
    _ROOT.pack_into(buf, 40, 40 - 4, 0, status - 48, 56 - 52, n)
    _I32.pack_into(buf, status, status - 32)
    return buf, first, status


def _elements(buf: bytearray, first: int, size: int, n: int) -> None:
    """The vector's elements: element i at 60 + 4i points to the result at first + size * i."""
    if n:
        struct.pack_into(f"<{n}I", buf, 60, *range(first - 60, first - 60 + (size - 4) * n,
                                                     size - 4))


def _fill_append(buf: bytearray, at: int, status: int,
                 runs: list[tuple[list[int], int, int, int]]) -> None:
    _elements(buf, at, 40, sum(len(r[0]) for r in runs))
    pack = _APPEND_RESULT.pack_into
    for indexes, sid, offset, ms in runs:
        for idx in indexes:
            pack(buf, at, at - 16, idx, sid, offset, ms, status - at - 32)
            at += 40
            offset += 1


def _fill_fetch(buf: bytearray, at: int, status: int,
                streams: list[tuple[int, int, list[tuple[int, int]], bytes | array[int]]]) -> None:
    _elements(buf, at, 32, sum(len(memoryview(s[3]).cast("B")) // 4 or 1 for s in streams))
    pack = _FETCH_RESULT.pack_into
    for idx, sid, runs, lengths in streams:
        sizes = iter(memoryview(lengths).cast("B").cast("i"))
        if not len(lengths):
            pack(buf, at, at - 16, idx, sid, 0, status - at - 20, -1)
            at += 32
        for first, count in runs:
            for off in range(first, first + count):
                pack(buf, at, at - 16, idx, sid, next(sizes), status - at - 20, off)
                at += 32


#: the C readers (_flat.pyi), None where they are not built or turned off
_read_columns: Callable[..., Any] | None  # its result's shape depends on its summary flag
_read_runs: Callable[[bytes | memoryview, int], list[tuple[int, int, list[int], int]] | None] | None
_append_run: Callable[[bytes | memoryview], UsualAppend | None] | None
try:  # in C where a compiler was there at install time: the same results
    allowed("streamlet.sbp._flat")
    from ._flat import append_run as _append_run
    from ._flat import fill_append, fill_fetch
    from ._flat import read_columns as _read_columns
    from ._flat import read_runs as _read_runs
except ImportError:
    fill_append, fill_fetch = _fill_append, _fill_fetch
    _read_columns = _read_runs = _append_run = None


def append_response(runs: list[tuple[list[int], int, int, int]]) -> bytes:
    """An AppendResponse, every result NONE, from runs of batches with consecutive offsets:
    (request indexes, stream id, the first's offset, append time ms)."""
    buf, at, status = _frame(_APPEND_VT, 40, sum(len(r[0]) for r in runs))
    fill_append(buf, at, status, runs)
    return bytes(buf)


def append_run_response(runs: list[tuple[Sequence[int], int, int, int]]) -> bytes:
    """``append_response`` for a request with runs (streamlet's): a run of request indexes
    given as a ``range`` is one result with its ``batch_count``; a list, a result per index.
    (``append_run_frames`` writes the usual answer, one run, faster.)"""
    rows: list[tuple[int, int, int, int, int]] = []
    for indexes, sid, offset, ms in runs:
        if isinstance(indexes, range) and indexes.step == 1:
            rows.append((indexes.start, len(indexes), sid, offset, ms))
        else:
            rows += [(idx, 1, sid, offset + k, ms) for k, idx in enumerate(indexes)]
    buf, at, status = _frame(_APPEND_RUN_VT, 40, len(rows))
    _elements(buf, at, 40, len(rows))
    for idx, count, sid, offset, ms in rows:
        _APPEND_RUN.pack_into(buf, at, at - 16, idx, sid, offset, ms, status - at - 32, count)
        at += 40
    return bytes(buf)


def fetch_response(streams: list[tuple[int, int, list[tuple[int, int]], bytes | array[int]]]
                   ) -> bytes:
    """A FetchResponse, every result NONE: per (request index, stream id, its records' offsets
    as runs of (first, count), their lengths as native int32) a result per record, or one empty
    result (length 0, offset -1) if it has none."""
    n = sum(len(memoryview(lengths).cast("B")) // 4 or 1 for _, _, _, lengths in streams)
    buf, at, status = _frame(_FETCH_VT, 32, n)
    fill_fetch(buf, at, status, streams)
    return bytes(buf)


def fetch_run_response(streams: list[tuple[int, int, list[tuple[int, int]], bytes | array[int],
                                           int]]) -> bytes:
    """A FetchResponse with run_results, every result NONE: per (request index, stream id, its
    records' offsets as runs of (first, count), their lengths as native int32, their total
    bytes) one result per run, its ``batch_lengths`` the run's lengths, or one empty result
    (length 0, offset -1) if it has none. Per record only its length is written (4 bytes, as
    a stored entry's header), where ``fetch_response`` writes a table."""
    rows: list[tuple[int, int, int, int, memoryview | bytes]] = []
    for idx, sid, runs, lengths, total in streams:
        ints = memoryview(lengths).cast("B").cast("i")
        if not runs:
            rows.append((idx, sid, -1, 0, b""))
        k = 0
        for first, count in runs:
            part = ints[k : k + count]
            rows.append((idx, sid, first, total if len(runs) == 1 else sum(part), part))
            k += count
        if k != len(ints):
            raise ValueError("the runs do not hold as many records as lengths")
    n = len(rows)
    buf, at, status = _frame(_FETCH_RUN_VT, 40, n)
    _elements(buf, at, 40, n)
    vectors = bytearray(sum(4 + 4 * len(r[4]) for r in rows))
    start = pos = len(buf)  # the vectors follow the status table, 4-aligned
    for idx, sid, first, size, sizes in rows:
        _FETCH_RUN.pack_into(buf, at, at - 16, idx, sid, size, status - at - 20, first,
                             pos - at - 32)
        at += 40
        count = len(sizes)
        _I32.pack_into(vectors, pos - start, count)
        data: memoryview | bytes = memoryview(sizes).cast("B") if count else b""
        if count and not _NATIVE_LE:
            swapped = array("i", data)
            swapped.byteswap()
            data = swapped.tobytes()
        vectors[pos - start + 4 : pos - start + 4 + 4 * count] = data
        pos += 4 + 4 * count
    return bytes(buf + vectors)


#: FetchResult with batch_count (length_prefixed) at 40 bytes: soffset, request_index,
#: stream_id, batch_length, status, base_offset, batch_count, padding. Its vtable (7 slots,
#: batch_lengths absent) is longer than _frame's room: it goes after the status table, so the
#: results' soffsets are negative (a vtable may be on either side of its table).
_FETCH_PREFIXED_VT = struct.pack("<HHHHHHHHH2x", 18, 40, 8, 4, 16, 20, 24, 0, 32)
_FETCH_PREFIXED = struct.Struct("<iiqiIqi4x")


def fetch_prefixed_response(streams: list[tuple[int, int, list[tuple[int, int]], list[int]]]
                            ) -> bytes:
    """A FetchResponse with length_prefixed, every result NONE: per (request index, stream id,
    its records' offsets as runs of (first, count), each run's payload bytes) one result per
    run with its ``batch_count``, or one empty result (length 0, offset -1) if it has none.
    Nothing is written per record: the payload says each one's length."""
    rows: list[tuple[int, int, int, int, int]] = []
    for idx, sid, runs, sizes in streams:
        if not runs:
            rows.append((idx, sid, -1, 0, 0))
        # a payload size per run, or a ValueError
        rows += [(idx, sid, first, size, count)
                 for (first, count), size in zip(runs, sizes, strict=True)]
    n = len(rows)
    buf, at, status = _frame(_FETCH_RUN_VT, 40, n)
    _elements(buf, at, 40, n)
    vt = len(buf)
    for idx, sid, first, size, count in rows:
        _FETCH_PREFIXED.pack_into(buf, at, at - vt, idx, sid, size, status - at - 20, first,
                                  count)
        at += 40
    return bytes(buf + _FETCH_PREFIXED_VT)


def _one_run_layout() -> tuple[bytes, int, int]:
    """An answer of one AppendRun result, laid out once: only the result's fields change."""
    buf, at, status = _frame(_APPEND_RUN_VT, 40, 1)
    _elements(buf, at, 40, 1)
    return bytes(buf), at, status


_ONE_RUN, _ONE_AT, _ONE_STATUS = _one_run_layout()
#: a whole answer frame of one AppendRun result: its flags and stream identifier at byte 7
_ONE_FRAME = head(Opcode.APPEND, 0, 0, len(_ONE_RUN), 0) + _ONE_RUN
_FLAGS_SID = struct.Struct(">BI")
_MORE, _END = int(Flags.RESPONSE), int(Flags.RESPONSE | Flags.RESPONSE_END)

#: an answer ``append_run_frames`` writes: (frame stream identifier, the last answer to its
#: request, first request index, batch count, stream id, base offset, append time ms)
RunAnswer = tuple[int, bool, int, int, int, int, int]


def append_run_frames(answers: list[RunAnswer]) -> bytes:
    """Whole APPEND answer frames, one AppendRun result each (a run of a request's batches
    confirmed with consecutive offsets), for one write: each a copy of one layout with its
    two places filled, no table built."""
    size, frame = len(_ONE_FRAME), 0
    buf = bytearray(_ONE_FRAME * len(answers))
    flags_sid, result = _FLAGS_SID.pack_into, _APPEND_RUN.pack_into
    at, soffset, status = PREFIX_SIZE + _ONE_AT, _ONE_AT - 16, _ONE_STATUS - _ONE_AT - 32
    for sid, end, index, count, stream, offset, ms in answers:
        flags_sid(buf, frame + 7, _END if end else _MORE, sid)
        result(buf, frame + at, soffset, index, stream, offset, ms, status, count)
        frame += size
    return bytes(buf)
