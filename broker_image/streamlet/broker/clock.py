"""The core's Clock on the running asyncio loop: the broker's time and scheduling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class LoopClock:
    """Looks the loop up at each call, so it can be made before the loop runs."""

    def time(self) -> float:
        # not the loop's time: uvloop's counts whole milliseconds, too coarse for the pending
        # chunk's pauses (core/packing.py); the loop's timers are given delays, not times
        return time.monotonic()

    def wall_time(self) -> float:
        return time.time()  # needs no loop: a create at start-up stamps it too

    def call_soon(self, callback: Callable[[], object]) -> object:
        return asyncio.get_running_loop().call_soon(callback)

    def call_later(self, delay: float, callback: Callable[[], object]) -> object:
        return asyncio.get_running_loop().call_later(delay, callback)
