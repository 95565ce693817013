"""Giving freed memory back to the system, and keeping large blocks for reuse.

Python frees a closed connection's objects at once, but glibc keeps the freed heap pages for
reuse: after 10,000 connections closed the broker stayed ~30 MB above where it started. Asking
glibc to return its free pages (malloc_trim) after connections closed brings most of it back;
it costs a millisecond or a few, so the broker does it when connections closed (or quiet ones
gave their read arenas back, transport.py) since the last time: every TRIM_INTERVAL_S, or
within TRIM_CHECK_S of a storm (STORM_FREED of them since), so that a storm's memory does not
wait out the interval (``trim_due``). Elsewhere than glibc this does nothing.

The other way round, large blocks: glibc gives a block above its mmap threshold (128 KiB at
first, raised as such blocks are freed) its own mapping, and trims the heap's free top past its
trim threshold, so a broker reading multi-megabyte chunks and cutting them into fetch answers
(SBP, MEGA, RSIO) starts each on fresh pages and pays a page fault per 4 KiB: half the broker's
CPU for an SBP FETCH of 1,000-byte records (2,100 -> 900-1,170 ns per record, bench/protocols).
``keep_large_blocks`` serves blocks up to 16 MiB from the heap and keeps up to 32 MiB of its
free top for the next one; the timer's malloc_trim still returns what closed connections freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable

TRIM_INTERVAL_S = 10.0
#: how often the broker asks trim_due; and how many connections closed (or arenas given back)
#: make a storm
TRIM_CHECK_S = 1.0
STORM_FREED = 256
MMAP_THRESHOLD = 16 << 20
TRIM_THRESHOLD = 32 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
#: Python's collector looks at the youngest objects after this many more allocations than
#: frees of tracked objects (700 by default)
GC_YOUNG = 50_000


def _glibc(name: str, *argtypes: type[ctypes._SimpleCData[int]]) -> Callable[..., int] | None:
    try:
        fn = getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)  # absent outside glibc
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = list(argtypes), ctypes.c_int
    return fn  # type: ignore[no-any-return]


_trim = _glibc("malloc_trim", ctypes.c_size_t)
_mallopt = _glibc("mallopt", ctypes.c_int, ctypes.c_int)


def keep_large_blocks() -> bool:
    """Serve large blocks from the heap and keep its free top (above); False when this is not
    glibc or it refused."""
    if _mallopt is None:
        return False
    return bool(_mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and _mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def trim_due(freed: int, since_last_s: float) -> bool:
    """Whether to give free memory back now: ``freed`` connections closed or read arenas given
    back since the last time, ``since_last_s`` seconds ago."""
    return freed >= STORM_FREED or (freed > 0 and since_last_s >= TRIM_INTERVAL_S)


def return_free_memory() -> bool:
    """Give glibc's free heap pages back to the system; False when this is not glibc."""
    if _trim is None:
        return False
    _trim(0)
    return True


def settle_collector() -> None:
    """Collect less often, and never look at what startup made again. With Python's default
    (a pass every 700 allocations, a full one over every object now and then) the collector
    took 8% of the broker's CPU serving SBP fetches; the broker's objects rarely form cycles,
    so few wait longer for it. Call once serving."""
    gc.collect()
    gc.freeze()  # startup's objects (modules, recovered streams) live as long as the process
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
