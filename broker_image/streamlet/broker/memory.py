"""Giving freed memory back to the system, and keeping large blocks for reuse.

``trim_due`` says when to ask glibc to return its free pages (malloc_trim): every
TRIM_INTERVAL_S once connections closed (or quiet ones gave their read arenas back), or within
TRIM_CHECK_S of a storm (STORM_FREED of them). ``keep_large_blocks`` serves blocks up to 16 MiB
from the heap and keeps up to 32 MiB of its free top, so multi-megabyte chunk reads do not
start on fresh pages each time. Elsewhere than glibc this does nothing.
Why: docs/reliability.md#the-rule-for-memory.
"""

from __future__ import annotations

import ctypes
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
        # the process's own symbols, the C library's among them: find_library("c") would run
        # ldconfig (a process, about 10 ms) at every import. Absent outside glibc.
        fn = getattr(ctypes.CDLL(None), name)
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
