"""Runs of elements in one call: a subscription's frames for a chunk's simple entries (onNext
frames, or with an elementSize onNextPacked frames) as one bytes, and an append's run of onNext
frames of one subscriber cut from a read as joined simple entries. Written in C
(``_runs.c``) where a compiler was there at install time; this module's Python gives the same
results. Where it is used: docs/protocols/reactive-streams.md, "Reading a stream"."""

from __future__ import annotations

import struct
from collections.abc import Callable

from ..native import allowed
from .codec import Malformed, read_varint, varint

_U32 = struct.Struct(">I")
ON_NEXT, ON_NEXT_PACKED = b"\x07", b"\x0a"


def _run_python(sub: int, data: bytes | bytearray | memoryview, max_count: int, max_bytes: int,
                split: int, element_size: int) -> tuple[bytes, int, int]:
    if sub < 0 or max_count < 0 or split < 1 or element_size < 0:
        raise ValueError("a negative id, count or size, or a split under 1")
    mv = memoryview(data)
    end = len(mv)
    head = varint(sub)
    out: list[bytes | memoryview] = []
    pos = n = size = 0
    group: list[memoryview] = []  # the elements of the onNextPacked being gathered
    per = max(split // element_size, 1) if element_size else 1
    while pos < end and n < max_count and size < max_bytes:
        if mv[pos] & 0x80:
            break  # a sub-entry batch: the general reader's
        if end - pos < 4:
            raise ValueError("truncated entry header")
        length = _U32.unpack_from(mv, pos)[0]
        if length > end - pos - 4:
            raise ValueError("truncated entry")
        if length > split or (element_size and length != element_size):
            break  # in parts, or not the promised size: the general reader's
        body = mv[pos + 4 : pos + 4 + length]
        if element_size:
            group.append(body)
            if len(group) == per:
                _close(out, head, group, element_size)
        else:
            out += (varint(1 + len(head) + length), ON_NEXT, head, body)
        pos += 4 + length
        size += length
        n += 1
    if group:
        _close(out, head, group, element_size)
    return b"".join(out), n, pos


def _close(out: list[bytes | memoryview], head: bytes, group: list[memoryview],
           element_size: int) -> None:
    """The frame of the elements gathered: onNextPacked, or onNext for one alone."""
    if len(group) == 1:
        out += (varint(1 + len(head) + element_size), ON_NEXT, head, group[0])
    else:
        count = varint(len(group))
        out += (varint(1 + len(head) + len(count) + len(group) * element_size), ON_NEXT_PACKED,
                head, count, *group)
    group.clear()


def _cut_python(data: bytes | bytearray | memoryview, sub: int, max_count: int,
                max_element: int) -> tuple[bytes, int, int]:
    if sub < 0 or max_count < 0 or max_element < 0:
        raise ValueError("a negative id, count or size")
    mv = memoryview(data)
    end = len(mv)
    out: list[bytes | memoryview] = []
    pos = n = 0
    while n < max_count and pos < end:
        try:
            got = read_varint(mv, pos, end)
            if got is None or got[0] > end - got[1] or got[0] < 1 or mv[got[1]] != 7:
                break
            stop = got[1] + got[0]
            got = read_varint(mv, got[1] + 1, stop)
        except Malformed:
            break
        if got is None or got[0] != sub or stop - got[1] > max_element:
            break
        out += (_U32.pack(stop - got[1]), mv[got[1] : stop])
        n += 1
        pos = stop
    return b"".join(out), n, pos


#: the C functions (_runs.pyi), None where they are not built or turned off
_run_c: Callable[[int, bytes | bytearray | memoryview, int, int, int, int],
                 tuple[bytes, int, int]] | None
_cut_c: Callable[[bytes | bytearray | memoryview, int, int, int], tuple[bytes, int, int]] | None
try:
    allowed("streamlet.rsio._runs")
    from ._runs import cut_on_next as _cut_c
    from ._runs import on_next_run as _run_c
except ImportError:  # no compiler at install time: the Python path gives the same results
    _run_c = _cut_c = None


def cut_on_next(data: bytes | bytearray | memoryview, sub: int, max_count: int,
                max_element: int, python: bool = False) -> tuple[bytes, int, int]:
    """``(entries, n, used)``: the whole onNext frames of subscriber ``sub`` that follow each
    other at the start of ``data`` (at most ``max_count``, none past an element longer than
    ``max_element``), their elements each behind a simple entry's u32 length, and the bytes of
    ``data`` they took. Stops at anything else (another message or subscriber, a frame not
    whole, a varint past 10 bytes or 64 bits): the general way takes it from there."""
    cut = _cut_python if python or _cut_c is None else _cut_c
    return cut(data, sub, max_count, max_element)


def on_next_run(sub: int, data: bytes | bytearray | memoryview, max_count: int, max_bytes: int,
                split: int, element_size: int = 0,
                python: bool = False) -> tuple[bytes, int, int]:
    """``(frames, n, pos)``: the frames for subscriber ``sub`` of the first ``n`` simple entries
    of ``data`` (stored entries, from an entry's start), and where the next entry starts. Takes
    at most ``max_count`` entries, none past the one that brings their bodies' bytes to
    ``max_bytes``; stops before a sub-entry batch, a body longer than ``split`` and, with
    ``element_size``, a body of another size (those go the general way: ``n`` may be 0). Each
    entry is an onNext; with ``element_size``, each ``split // element_size`` of them (at
    least 1) an onNextPacked, a group of one an onNext. ValueError on a truncated entry."""
    run = _run_python if python or _run_c is None else _run_c
    return run(sub, data, max_count, max_bytes, split, element_size)
