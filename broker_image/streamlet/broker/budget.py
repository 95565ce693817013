"""The bytes of incomplete frames all connections may hold together (``limits.max_buffered_bytes``).

A connection reserves the whole length of a frame that arrives in pieces as soon as its size
is known, so a frame it was granted can always complete; one that does not fit waits (its
reading paused, holding no more than the read it has) and is granted space in arrival order as
other frames complete. Reserving the declared length, not the bytes held so far, is what makes
that safe: space is never promised twice, so waiters cannot starve each other into a deadlock.
A frame larger than the whole budget cannot happen: the budget is at least ``frame_limit``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol


class Waiter(Protocol):
    def granted(self, size: int) -> None:
        """The space asked for is now reserved for the caller."""


class FrameBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0: no limit
        self.used = 0
        self._waiting: OrderedDict[Waiter, int] = OrderedDict()

    def reserve(self, waiter: Waiter, size: int) -> bool:
        """Reserve ``size`` bytes now (True), or queue ``waiter`` to be granted them (False)."""
        if not self._waiting and (not self.limit or self.used + size <= self.limit):
            self.used += size
            return True
        self._waiting[waiter] = size
        return False

    def release(self, size: int) -> None:
        self.used -= size
        self._grant()

    def cancel(self, waiter: Waiter) -> None:
        """``waiter`` no longer waits (its connection closed)."""
        if self._waiting.pop(waiter, None) is not None:
            self._grant()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _grant(self) -> None:
        # In arrival order: a big frame first in line is not overtaken for ever by small ones.
        while self._waiting:
            waiter, size = next(iter(self._waiting.items()))
            if self.limit and self.used + size > self.limit:
                return
            del self._waiting[waiter]
            self.used += size
            waiter.granted(size)
