"""The operator's roll of a Broker's pods, decided as pure functions (driver.py carries it out).

The StatefulSet's ``updateStrategy`` is ``OnDelete``. Each tick :func:`next_step` says what to do
with the pods whose template hash differs from the StatefulSet's, one pod at a time, in
:func:`roll_order`: wait while any pod is down; stop the next only if every replicated stream
keeps a quorum in sync without it (``safe_to_stop``) and all are in sync; transfer its
leaderships first; then delete it. An outdated pod not Ready for ``not_ready_timeout`` is rolled
forward first (deleted: down already, it costs no availability; quorum and transfers still
checked when its broker answers). The ``Rolling`` condition says why a roll waits.
Mechanism: docs/operations.md#what-rolls-the-pods.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from streamlet.replication.placement import StreamMembers, stop_check

#: The Broker condition this module's steps set.
ROLLING = "Rolling"
#: The Event of a pod rolled forward (ROLLING_FORWARD).
POD_ROLLED_FORWARD = "PodRolledForward"


@dataclass(frozen=True)
class PodState:
    """A Pod object of the Broker: its template hash (None: none), ready, being deleted, and
    for how long (seconds) it has not been Ready (None: Ready, or not known)."""

    ordinal: int
    revision: str | None
    ready: bool = True
    terminating: bool = False
    not_ready_for: float | None = None


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
ROLLING_FORWARD = "RollingForwardPod"  # an outdated pod not Ready past the timeout: deleted
NEW_POD_NOT_READY = "NewPodNotReady"  # a pod of the current template not Ready past it


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


def overdue(pod: PodState, timeout: float) -> bool:
    """Whether ``pod`` has not been Ready for ``timeout`` seconds or more (0: never)."""
    return (timeout > 0 and not pod.ready and not pod.terminating
            and pod.not_ready_for is not None and pod.not_ready_for >= timeout)


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def next_step(pods: Sequence[PodState], revision: str | None,
              streams: Sequence[StreamState], answering: Collection[int] | None = None,
              replicas: int = 0, in_progress: bool = False,
              avoid: Collection[int] = (), not_ready_timeout: float = 0.0) -> Step:
    """What the roll does this tick (the module's docstring gives the rule). ``answering``:
    the pods whose brokers answered this tick's probe (None: not probed, no replicated
    streams); a pod that does not answer is down, whatever its Pod says. ``replicas``: the
    StatefulSet's; a pod below it with no Pod object (deleted, not made again yet) is down.
    ``in_progress``: a roll was going on (the Rolling condition): it ends once every pod is
    back, the last one rolled included. ``avoid``: drained pods, never given a leadership.
    ``not_ready_timeout``: seconds after which an outdated pod whose Pod is not Ready is
    rolled forward rather than waited for (0: waited for, for ever)."""
    stale = outdated(pods, revision)
    count = max(replicas, len(pods))
    done = f"{count - len(stale)} of {count} pods updated"
    listed = {p.ordinal for p in pods}
    down = sorted({p.ordinal for p in pods if p.terminating or not p.ready
                   or (answering is not None and p.ordinal not in answering)}
                  | set(range(replicas)) - listed)
    if not stale and not (in_progress and down):
        return Step(Action.IDLE, message="every pod runs the current pod template")
    late = {p.ordinal: p for p in pods if overdue(p, not_ready_timeout)}
    forward = roll_order([o for o in stale if o in late], streams)
    if forward:
        return _roll_forward(late[forward[0]], stale, streams, answering, avoid, done,
                             not_ready_timeout)
    if down:
        stuck = next((late[o] for o in down if o in late), None)
        if stuck is not None:
            return Step(Action.WAIT, stuck.ordinal, NEW_POD_NOT_READY,
                        f"pod {stuck.ordinal} runs the current pod template and has not been "
                        f"Ready for {_duration(stuck.not_ready_for or 0.0)}: it may not start "
                        f"(its image, its configuration: see its Events); a change to the "
                        f"Broker rolls it forward ({done})")
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
    transfers = _transfers(pod, stale, streams, avoid)
    if transfers:
        return _transferring(pod, transfers, done)
    note = f"; {check.why}" if check.reported else ""
    return Step(Action.DELETE, pod, RESTARTING, f"restarting pod {pod} ({done}){note}")


def _transfers(pod: int, stale: Iterable[int], streams: Sequence[StreamState],
               avoid: Collection[int]) -> tuple[tuple[str, int], ...]:
    """(stream, target) for each stream ``pod`` leads that has another member in sync."""
    led = leading(streams)
    transfers = []
    for s in sorted(streams, key=lambda s: s.name):
        if s.leader == pod:
            target = transfer_target(s, pod, stale, led, avoid)
            if target is not None:  # none: a stream with no other member in sync (reported)
                transfers.append((s.name, target))
                led[target] = led.get(target, 0) + 1
    return tuple(transfers)


def _transferring(pod: int, transfers: tuple[tuple[str, int], ...], done: str) -> Step:
    return Step(Action.TRANSFER, pod, TRANSFERRING, f"moving leadership off pod {pod}: "
                + ", ".join(f"{n} to pod {t}" for n, t in transfers) + f" ({done})", transfers)


def _roll_forward(pod: PodState, stale: Sequence[int], streams: Sequence[StreamState],
                  answering: Collection[int] | None, avoid: Collection[int], done: str,
                  timeout: float) -> Step:
    """An outdated pod not Ready past the timeout: deleted, so that it is made again from the
    current template. Its Pod is out of the Services and the PDB's count already; when its
    broker still answers (a member catching up), what it holds is checked as for any pod."""
    o = pod.ordinal
    late = _duration(pod.not_ready_for or 0.0)
    if answering is not None and o in answering:
        check = stop_check(o, _members(streams))
        if not check.safe:
            return Step(Action.WAIT, o, WAITING_FOR_QUORUM,
                        f"pod {o}, not Ready for {late}, may not stop: {check.why} ({done})")
        transfers = _transfers(o, stale, streams, avoid)
        if transfers:
            return _transferring(o, transfers, done)
    return Step(Action.DELETE, o, ROLLING_FORWARD,
                f"rolling pod {o} forward: not Ready for {late} (the timeout is "
                f"{_duration(timeout)}), it is made again from the current pod template ({done})")
