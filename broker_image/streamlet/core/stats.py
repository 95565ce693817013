"""Counters the core keeps for whoever wants to read them (the broker's /metrics reads them
when scraped): plain integers and one fixed-bucket histogram, no metrics library. What the
data path pays is an addition per chunk, never per message."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable

#: Upper bounds (seconds) of the publish-to-confirm buckets: a chunk confirmed on its write
#: takes well under a millisecond; a replicated one a network round trip; fsync=chunk a disk
#: flush. The last bucket (+Inf) is implicit.
LATENCY_BOUNDS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                     0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LatencyHistogram:
    """Samples counted per bucket (not cumulative; the reader sums), with their sum. ``now``
    is its own clock: uvloop's loop time moves in whole milliseconds, too coarse here."""

    __slots__ = ("bounds", "counts", "total", "count", "now")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BOUNDS,
                 now: Callable[[], float] = time.perf_counter) -> None:
        self.now = now
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds
        self.count += 1

    def observe_since(self, start: float) -> None:
        """A sample from ``start``, a reading of ``now``."""
        self.observe(self.now() - start)
