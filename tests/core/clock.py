"""A manual clock for the core's Clock port: time moves only when a test says so."""

from __future__ import annotations

from collections.abc import Callable


class ManualClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self._due: list[tuple[float, int, Callable[[], object]]] = []
        self._seq = 0

    def time(self) -> float:
        return self.now

    def call_soon(self, callback: Callable[[], object]) -> object:
        return self.call_later(0.0, callback)

    def call_later(self, delay: float, callback: Callable[[], object]) -> object:
        self._seq += 1
        self._due.append((self.now + delay, self._seq, callback))
        return None

    @property
    def pending(self) -> int:
        return len(self._due)

    def advance(self, seconds: float = 0.0) -> None:
        """Move time on and run what has come due, in order."""
        self.now += seconds
        while True:
            ready = sorted(d for d in self._due if d[0] <= self.now)
            if not ready:
                return
            self._due.remove(ready[0])
            ready[0][2]()
