"""The operator's roll of a Broker's pods, decided as pure functions (driver.py carries it out).

The StatefulSet's ``updateStrategy`` is ``OnDelete``. Each tick :func:`next_step` says what to do
with the pods whose template hash differs from the StatefulSet's, one pod at a time, in
:func:`roll_order`: wait while any pod is down; stop the next only if every replicated stream
keeps a quorum in sync without it (``safe_to_stop``) and all are in sync; transfer its
leaderships first; then delete it. Nothing is forced: the Broker's ``Rolling`` condition says
why a roll waits. Mechanism: docs/operations.md#what-rolls-the-pods.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from streamlet.replication.placement import StreamMembers, stop_check

#: The Broker condition this module's steps set.
ROLLING = "Rolling"


@dataclass(frozen=True)
class PodState:
    """A Pod object of the Broker: its template hash (None: none), ready, being deleted."""

    ordinal: int
    revision: str | None
    ready: bool = True
    terminating: bool = False


@dataclass(frozen=True)
class StreamState:
    """A replicated stream as this tick saw it: ``leader`` None while it has none;
    ``in_sync`` None when it was not looked at this tick (being elected, not discovered)."""

    name: str
    members: tuple[int, ...]
    leader: int | None
    in_sync: frozenset[int] | None


class Action(Enum):
    IDLE = "idle"  # every pod runs the current template
    WAIT = "wait"  # a pod may not stop now: ``reason`` and ``message`` say why
    TRANSFER = "transfer"  # move the leaderships off ``pod`` first (``transfers``)
    DELETE = "delete"  # delete ``pod``: its controller makes it again from the new template


# Reasons of the Rolling condition.
UP_TO_DATE = "UpToDate"
WAITING_FOR_POD = "WaitingForPod"
WAITING_FOR_QUORUM = "WaitingForQuorum"
WAITING_FOR_SYNC = "WaitingForSync"
TRANSFERRING = "TransferringLeadership"
RESTARTING = "RestartingPod"


@dataclass(frozen=True)
class Step:
    action: Action
    pod: int | None = None
    reason: str = UP_TO_DATE
    message: str = ""
    #: (stream, target member) for each stream ``pod`` leads
    transfers: tuple[tuple[str, int], ...] = ()


def outdated(pods: Iterable[PodState], revision: str | None) -> list[int]:
    """The ordinals of the pods not made from the current template (``revision`` None: the
    StatefulSet carries no hash yet, nothing is rolled)."""
    if revision is None:
        return []
    return sorted(p.ordinal for p in pods if p.revision != revision)


def leading(streams: Iterable[StreamState]) -> dict[int, int]:
    """Streams led per pod."""
    counts: dict[int, int] = {}
    for s in streams:
        if s.leader is not None:
            counts[s.leader] = counts.get(s.leader, 0) + 1
    return counts


def roll_order(candidates: Iterable[int], streams: Sequence[StreamState]) -> list[int]:
    """The pods leading the fewest streams first (their leaderships then move to pods already
    rolled, and move once), the highest ordinal first among equals (the StatefulSet's order)."""
    led = leading(streams)
    return sorted(candidates, key=lambda o: (led.get(o, 0), -o))


def transfer_target(stream: StreamState, pod: int, stale: Iterable[int],
                    led: Mapping[int, int], avoid: Collection[int] = ()) -> int | None:
    """Where ``stream``'s leadership goes before ``pod`` stops: an in-sync member on another
    pod not in ``avoid`` (drained, drain.py), one already rolled (not in ``stale``) first, then
    the one leading the fewest streams, then the lowest ordinal. None: no such member."""
    old = set(stale)
    options = [m for m in stream.members
               if m != pod and m not in avoid and m in (stream.in_sync or ())]
    if not options:
        return None
    return min(options, key=lambda m: (m in old, led.get(m, 0), m))


def _members(streams: Iterable[StreamState]) -> list[StreamMembers]:
    return [StreamMembers(s.name, s.members, s.in_sync or frozenset()) for s in streams]


def next_step(pods: Sequence[PodState], revision: str | None,
              streams: Sequence[StreamState], answering: Collection[int] | None = None,
              replicas: int = 0, in_progress: bool = False,
              avoid: Collection[int] = ()) -> Step:
    """What the roll does this tick (the module's docstring gives the rule). ``answering``:
    the pods whose brokers answered this tick's probe (None: not probed, no replicated
    streams); a pod that does not answer is down, whatever its Pod says. ``replicas``: the
    StatefulSet's; a pod below it with no Pod object (deleted, not made again yet) is down.
    ``in_progress``: a roll was going on (the Rolling condition): it ends once every pod is
    back, the last one rolled included. ``avoid``: drained pods, never given a leadership."""
    stale = outdated(pods, revision)
    count = max(replicas, len(pods))
    done = f"{count - len(stale)} of {count} pods updated"
    listed = {p.ordinal for p in pods}
    down = sorted({p.ordinal for p in pods if p.terminating or not p.ready
                   or (answering is not None and p.ordinal not in answering)}
                  | set(range(replicas)) - listed)
    if not stale and not (in_progress and down):
        return Step(Action.IDLE, message="every pod runs the current pod template")
    if down:
        return Step(Action.WAIT, down[0], WAITING_FOR_POD,
                    f"waiting for pod {down[0]} to be back and ready ({done})")
    pod = roll_order(stale, streams)[0]
    check = stop_check(pod, _members(streams))
    if not check.safe:
        return Step(Action.WAIT, pod, WAITING_FOR_QUORUM, f"pod {pod} may not stop: {check.why}"
                    f" ({done})")
    unknown = sorted(s.name for s in streams if s.in_sync is None)
    behind = sorted(s.name for s in streams if s.in_sync is not None and s.leader is not None
                    and not set(s.members) <= s.in_sync)
    if unknown or behind:
        parts = ([f"not in sync: {', '.join(behind)}"] if behind else []) + (
            [f"being elected or not yet known: {', '.join(unknown)}"] if unknown else [])
        return Step(Action.WAIT, pod, WAITING_FOR_SYNC,
                    f"pod {pod} waits until every stream is in sync ({'; '.join(parts)}; {done})")
    led = leading(streams)
    transfers = []
    for s in sorted(streams, key=lambda s: s.name):
        if s.leader == pod:
            target = transfer_target(s, pod, stale, led, avoid)
            if target is not None:  # none: a stream with no other member in sync (reported)
                transfers.append((s.name, target))
                led[target] = led.get(target, 0) + 1
    if transfers:
        return Step(Action.TRANSFER, pod, TRANSFERRING,
                    f"moving leadership off pod {pod}: " + ", ".join(
                        f"{n} to pod {t}" for n, t in transfers) + f" ({done})",
                    tuple(transfers))
    note = f"; {check.why}" if check.reported else ""
    return Step(Action.DELETE, pod, RESTARTING, f"restarting pod {pod} ({done}){note}")
