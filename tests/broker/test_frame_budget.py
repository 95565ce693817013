"""FrameBudget: reservations, waiters granted in arrival order, cancellation (a table)."""

from __future__ import annotations

import pytest

from streamlet.broker.budget import FrameBudget


class Peer:
    def __init__(self, name: str, log: list[tuple[str, int]]) -> None:
        self.name, self.log = name, log

    def granted(self, size: int) -> None:
        self.log.append((self.name, size))


# steps: ("reserve", peer, size, expected result) | ("release", size) | ("cancel", peer);
# then the grants seen and the bytes in use at the end
CASES = [
    ("fits", 10, [("reserve", "a", 6, True), ("reserve", "b", 4, True)], [], 10),
    ("waits then granted", 10, [("reserve", "a", 6, True), ("reserve", "b", 6, False),
                                ("release", 6)], [("b", 6)], 6),
    ("arrival order: a small one does not overtake", 10,
     [("reserve", "a", 8, True), ("reserve", "b", 9, False), ("reserve", "c", 1, False),
      ("release", 8)], [("b", 9), ("c", 1)], 10),
    ("granted only while it fits", 10,
     [("reserve", "a", 8, True), ("reserve", "b", 5, False), ("reserve", "c", 6, False),
      ("release", 8)], [("b", 5)], 5),
    ("a cancelled waiter lets the next one in", 10,
     [("reserve", "a", 5, True), ("reserve", "b", 9, False), ("reserve", "c", 5, False),
      ("cancel", "b")], [("c", 5)], 10),
    ("no limit", 0, [("reserve", "a", 1 << 40, True), ("reserve", "b", 1 << 40, True)], [], 2 << 40),
]


@pytest.mark.parametrize(("limit", "steps", "grants", "used"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_frame_budget(limit: int, steps: list[tuple], grants: list[tuple[str, int]], used: int) -> None:  # type: ignore[type-arg]
    log: list[tuple[str, int]] = []
    peers = {n: Peer(n, log) for n in "abc"}
    budget = FrameBudget(limit)
    for step in steps:
        if step[0] == "reserve":
            assert budget.reserve(peers[step[1]], step[2]) is step[3], step
        elif step[0] == "release":
            budget.release(step[1])
        else:
            budget.cancel(peers[step[1]])
    assert log == grants
    assert budget.used == used
