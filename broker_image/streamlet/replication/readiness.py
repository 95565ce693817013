"""Whether a broker is ready to take traffic (its pod's readinessProbe): it serves, and every
replicated stream it follows is in sync, or has had no reachable leader for LEADERLESS_S.

A leader is ready. A follower heard from within LINK_FRESH_S is ready once its log holds what
the leader last said is committed; one with no such link, and a fenced member (restarted,
waiting for its role), wait LEADERLESS_S, then count as ready: a member whose leader is gone
must not hold its pod out for ever, or a whole cluster restarting would wait on itself. A
learner (being added, not counted) holds nothing. Mechanism: docs/operations.md#readiness.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: a link silent this long is no link (an idle leader speaks every half second)
LINK_FRESH_S = 5.0
#: a member with no working link to a leader this long no longer holds readiness
LEADERLESS_S = 30.0


@dataclass(frozen=True)
class MemberView:
    """One replicated stream as this broker holds it. ``role``: leader, follower or fenced;
    ``heard_s``: seconds since the leader was last heard on a working link (None: no link);
    ``waiting_s``: seconds since the leader was last heard, or since the member took its role
    when it never was; ``caught_up``: the log holds the leader's last commit point."""

    stream: str
    role: str
    learner: bool = False
    heard_s: float | None = None
    waiting_s: float = 0.0
    caught_up: bool = False


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reasons: tuple[str, ...] = ()

    def text(self) -> str:
        return "ready\n" if self.ready else "not ready: " + "; ".join(self.reasons) + "\n"


def holds_back(m: MemberView) -> str | None:
    """Why ``m`` keeps its broker not ready (None: it does not)."""
    if m.role == "leader" or m.learner:
        return None
    if m.role == "follower" and m.heard_s is not None and m.heard_s < LINK_FRESH_S:
        return None if m.caught_up else f"{m.stream}: catching up with its leader"
    if m.waiting_s >= LEADERLESS_S:
        return None  # no reachable leader: nothing to be out of sync with
    if m.role == "follower":
        return f"{m.stream}: reaching its leader ({m.waiting_s:.0f}s)"
    return f"{m.stream}: waiting for its role ({m.waiting_s:.0f}s)"


def readiness(serving: bool, members: Iterable[MemberView]) -> Readiness:
    """The broker's readiness: serving (its stream listeners open) and no member holding it
    back; the reasons name each member that does."""
    reasons = [] if serving else ["not serving yet"]
    reasons += sorted(r for r in map(holds_back, members) if r is not None)
    return Readiness(not reasons, tuple(reasons))
