"""MEGA's pipelined requests in runs: the PRODUCEs to one topic (or the CONSUMEs of consecutive
offsets of one topic) that follow each other in a read, cut in one call, and the answers of a
run built in one call. A PRODUCE's payload length and payload are a simple entry as a chunk
stores it, so a run's payloads joined are a publish batch's entries; a stored simple entry is
a CONSUME answer's payload as it is. In C (``_runs.c``) where it was built; the Python here
gives the same results (tests/mega/test_mega_runs.py). Mechanism: docs/protocols/mega.md.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable
from typing import Any

from ..native import allowed

_HEAD = struct.Struct(">IBI")  # correlation, type, topic length
_U32 = struct.Struct(">I")
_PRODUCED = struct.Struct(">IBQQ")  # correlation, 1, timestamp, offset
_SUCCESS = struct.Struct(">IBQ")  # correlation, 1, timestamp
_PRODUCE, _CONSUME = 1, 2
_MASK = (1 << 64) - 1

Buffer = bytes | bytearray | memoryview


def _fixed(frame: memoryview, kind: int) -> int:
    """The length of ``frame``'s header, topic and timestamp if it is a request of ``kind``
    with four bytes more; -1 otherwise."""
    if len(frame) < _HEAD.size or frame[4] != kind:
        return -1
    fixed = _HEAD.size + _U32.unpack_from(frame, 5)[0] + 8
    return fixed if len(frame) >= fixed + 4 else -1


def _produce_run_python(frame: Buffer, ahead: Buffer, max_payload: int
                        ) -> tuple[int, bytes, bytes] | None:
    f, a = memoryview(frame), memoryview(ahead)
    fixed = _fixed(f, _PRODUCE)
    if fixed < 0 or fixed + 4 + _U32.unpack_from(f, fixed)[0] != len(f):
        return None
    same = f[4:fixed - 8]  # type, topic length, topic
    corrs, entries = [f[:4]], [f[fixed:]]
    pos, end = 0, len(a)
    while end - pos >= fixed + 4 and a[pos + 4 : pos + fixed - 8] == same:
        size = _U32.unpack_from(a, pos + fixed)[0]
        if size > max_payload or end - pos - fixed - 4 < size:
            break
        corrs.append(a[pos : pos + 4])
        entries.append(a[pos + fixed : pos + fixed + 4 + size])
        pos += fixed + 4 + size
    return pos, b"".join(corrs), b"".join(entries)


def _consume_run_python(frame: Buffer, ahead: Buffer) -> tuple[int, bytes, int] | None:
    f, a = memoryview(frame), memoryview(ahead)
    fixed = _fixed(f, _CONSUME)
    if fixed < 0 or fixed + 4 != len(f):
        return None
    same = f[4:fixed - 8]
    first = _U32.unpack_from(f, fixed)[0]
    corrs, pos, end, step = [f[:4]], 0, len(a), fixed + 4
    while (end - pos >= step and a[pos + 4 : pos + fixed - 8] == same
           and _U32.unpack_from(a, pos + fixed)[0] == first + len(corrs)):
        corrs.append(a[pos : pos + 4])
        pos += step
    return pos, b"".join(corrs), first


def _produced_python(corrs: Buffer, timestamp: int, offset: int) -> bytes:
    if len(corrs) % 4:
        raise ValueError("correlation ids not a whole number of u32")
    ids = struct.unpack(f">{len(corrs) // 4}I", corrs)
    ts = timestamp & _MASK
    pack = _PRODUCED.pack
    return b"".join([pack(c, 1, ts, (offset + i) & _MASK) for i, c in enumerate(ids)])


def _consumed_python(corrs: Buffer, timestamp: int, entries: Buffer, positions: Buffer,
                     index: int) -> bytes:
    if len(corrs) % 4 or len(positions) % 8:
        raise ValueError("correlation ids or positions cut short")
    n = len(corrs) // 4
    at = array("q")
    at.frombytes(bytes(positions))
    if index < 0 or index + n + 1 > len(at):
        raise ValueError("answers past the positions")
    e = memoryview(entries)
    out: list[bytes | memoryview] = []
    ts = timestamp & _MASK
    for i, c in enumerate(struct.unpack(f">{n}I", corrs)):
        p, q = at[index + i], at[index + i + 1]
        if p < 0 or p > q or q > len(e):
            raise ValueError("a position outside the entries")
        out += (_SUCCESS.pack(c, 1, ts), e[p:q])
    return b"".join(out)


def _positions_python(data: Buffer) -> bytes | None:
    d = memoryview(data)
    at = array("q")
    pos, end = 0, len(d)
    while pos < end:
        if d[pos] & 0x80 or end - pos < 4:
            return None
        size = _U32.unpack_from(d, pos)[0]
        if size > end - pos - 4:
            return None
        at.append(pos)
        pos += 4 + size
    at.append(pos)
    return at.tobytes()


#: the C functions (_runs.pyi), None where they are not built or turned off
_c: Any = None
try:
    allowed("streamlet.mega._runs")
    from . import _runs as _c
except ImportError:  # no compiler at install time: the Python path gives the same results
    _c = None


def _pick(c_name: str, python: Callable[..., Any]) -> Callable[..., Any]:
    return getattr(_c, c_name) if _c is not None else python


_produce_c = _pick("produce_run", _produce_run_python)
_consume_c = _pick("consume_run", _consume_run_python)
_produced_c = _pick("produced_answers", _produced_python)
_consumed_c = _pick("consumed_answers", _consumed_python)
_positions_c = _pick("simple_positions", _positions_python)


def produce_run(frame: Buffer, ahead: Buffer, max_payload: int, python: bool = False
                ) -> tuple[int, bytes, bytes] | None:
    """``frame``, a whole PRODUCE, and the PRODUCEs to its topic that follow it whole in
    ``ahead`` (the bytes of a read after it), each payload at most ``max_payload`` bytes (a
    larger one ends the run: the splitter refuses it): the bytes of ``ahead`` they took, their
    correlation ids packed (u32 each) and their entries joined (each payload behind its
    length). None when ``frame`` is not a PRODUCE of its layout."""
    return (_produce_run_python if python else _produce_c)(frame, ahead, max_payload)


def consume_run(frame: Buffer, ahead: Buffer, python: bool = False
                ) -> tuple[int, bytes, int] | None:
    """``frame``, a whole CONSUME, and the CONSUMEs of its topic for the offsets after its own,
    one by one, that follow it whole in ``ahead``: the bytes of ``ahead`` taken, their
    correlation ids packed and the first offset. None when ``frame`` is not a CONSUME."""
    return (_consume_run_python if python else _consume_c)(frame, ahead)


def produced_answers(corrs: Buffer, timestamp: int, offset: int, python: bool = False) -> bytes:
    """PRODUCE's success answers for ``corrs`` (packed u32), the first with ``offset``, each
    next one the offset after (one batch's messages: consecutive offsets)."""
    return (_produced_python if python else _produced_c)(corrs, timestamp, offset)


def consumed_answers(corrs: Buffer, timestamp: int, entries: Buffer, positions: Buffer,
                     index: int, python: bool = False) -> bytes:
    """CONSUME's success answers for ``corrs``: the i-th one's payload is ``entries`` from
    ``positions[index + i]`` to ``positions[index + i + 1]`` (native int64s: a record's
    length and bytes, as ``simple_positions`` finds them in a chunk of simple entries).
    ValueError for a position outside ``entries``."""
    return (_consumed_python if python else _consumed_c)(corrs, timestamp, entries, positions,
                                                         index)


def simple_positions(data: Buffer, python: bool = False) -> bytes | None:
    """Where each simple entry of ``data`` (a chunk's data section) starts, then its end, as
    native int64s; None at a sub-entry batch or an entry cut short (the caller cuts records
    the general way)."""
    return (_positions_python if python else _positions_c)(data)
