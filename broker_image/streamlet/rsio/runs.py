"""A subscription's frames for a run of stored records in one call: the onNext frames (or, with
an elementSize, onNextPacked frames) of a chunk's simple entries, as one bytes. Written in C
(``_runs.c``) where a compiler was there at install time; this module's Python gives the same
results. Where it is used: docs/protocols/reactive-streams.md, "Reading a stream"."""

from __future__ import annotations

import struct
from collections.abc import Callable

from ..native import allowed
from .codec import varint

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


#: the C function (_runs.pyi), None where it is not built or turned off
_run_c: Callable[[int, bytes | bytearray | memoryview, int, int, int, int],
                 tuple[bytes, int, int]] | None
try:
    allowed("streamlet.rsio._runs")
    from ._runs import on_next_run as _run_c
except ImportError:  # no compiler at install time: the Python path gives the same results
    _run_c = None


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
