"""Changing a replicated stream's member set: one member added or removed at a time (Raft's
single-server change), what to change next, when a new member has caught up, and which
leaderships a rebalance moves. Pure.

``change_refusal``: why a change may not start; ``change_step``: what a driver does next for a
change under way; ``next_change``: the next change toward the desired members (members
``lost_since`` long enough replaced, members moved off pods being removed, the count changed);
``rebalance`` and ``preferred_moves``: the planned transfers that spread leaders. The rules,
and why a single change rather than joint consensus: docs/replication.md#membership-membershippy.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from .liveness import Contact
from .model import NO_LEADER, Tail, quorum
from .placement import Load, Pod


class Kind(Enum):
    ADD = "add"
    REMOVE = "remove"


@dataclass(frozen=True, slots=True)
class Change:
    """One member added to or removed from a stream's member set."""

    kind: Kind
    member: int

    def apply(self, members: Iterable[int]) -> tuple[int, ...]:
        """The member set after the change, ascending."""
        now = set(members)
        if self.kind is Kind.ADD:
            now.add(self.member)
        else:
            now.discard(self.member)
        return tuple(sorted(now))

    def __str__(self) -> str:
        return f"{self.kind.value} member {self.member}"


def change_refusal(members: Collection[int], leader: int, in_sync: Collection[int],
                   change: Change, changing: Change | None = None) -> str | None:
    """Why ``change`` may not start now; None: it may.

    One change at a time, and only under a leader whose epoch has settled (a majority of the
    members in sync with it: Raft's rule that a leader commits in its own term before it
    changes the configuration). The leader is never removed (transfer it first) nor the last
    member (delete the stream). The set after the change must still have a majority in sync,
    counting an added member (it joins once caught up) and not a removed one.
    """
    current = set(members)
    if changing is not None:
        return f"a change is in progress ({changing}): one at a time"
    if leader == NO_LEADER or leader not in current:
        return "the stream has no leader: a change waits for the election"
    synced = (set(in_sync) & current) | {leader}
    need = quorum(len(current))
    if len(synced) < need:
        return (f"{len(synced)} of {len(current)} members in sync, fewer than a majority "
                f"({need}): a change waits until the stream has settled")
    if change.kind is Kind.ADD:
        if change.member in current:
            return f"member {change.member} is already a member"
        after = synced | {change.member}
    else:
        if change.member not in current:
            return f"member {change.member} is not a member"
        if len(current) == 1:
            return "the last member cannot be removed: delete the stream instead"
        if change.member == leader:
            return f"member {change.member} leads: transfer its leadership first"
        after = synced - {change.member}
    new = change.apply(current)
    if len(after) < quorum(len(new)):
        return (f"{change} would leave {len(after)} of {len(new)} members in sync, fewer "
                f"than a majority ({quorum(len(new))})")
    return None


def caught_up(target: int, learner: Tail | None) -> bool:
    """Whether a learner may join: it holds every chunk up to ``target`` (the leader's last
    chunk id as seen at an earlier look: a learner a moment behind a busy leader counts)."""
    return learner is not None and learner.chunk_id >= target


class Action(Enum):
    LEARN = "learn"  # ask the leader to make the new member a learner (again)
    WAIT = "wait"  # look again at the next tick
    JOIN = "join"  # record the next epoch with the new member set, then assign it
    TRANSFER = "transfer"  # the member to remove leads: transfer to ``to`` first
    ABORT = "abort"  # give the change up (the learner's copy is dropped)


@dataclass(frozen=True, slots=True)
class Step:
    action: Action
    why: str
    to: int | None = None  # TRANSFER's target


def change_step(change: Change, epoch: int, members: Collection[int], leader: int,
                in_sync: Collection[int], learner: Contact | None, target: int,
                waited: float, timeout: float) -> Step:
    """What a driver does next for ``change`` of a stream in ``epoch``.

    An add: the learner is made (again, after a leader change: it follows ``epoch``) and waits
    until it is ``caught_up`` with ``target`` (the leader's last chunk at the previous look),
    then joins when ``change_refusal`` allows. A remove joins at once when allowed; a leader
    to remove is first transferred to the in-sync member leading nothing else of it (the
    lowest). Whatever waits longer than ``timeout`` seconds is given up.
    """
    late = waited > timeout
    if leader == NO_LEADER:
        return Step(Action.ABORT if late else Action.WAIT,
                    "no leader: the change waits for the election")
    if change.kind is Kind.ADD:
        following = (learner is not None and learner.following and learner.epoch == epoch)
        if not following:
            if late:
                return Step(Action.ABORT, f"member {change.member} did not follow within "
                                          f"{timeout:g} s")
            return Step(Action.LEARN, f"member {change.member} learns from member {leader}")
        assert learner is not None
        if not caught_up(target, learner.tail):
            got = learner.tail.chunk_id if learner.tail is not None else -1
            return Step(Action.ABORT if late else Action.WAIT,
                        f"member {change.member} catching up: chunk {got} of {target}")
    elif change.member == leader:
        others = sorted(m for m in in_sync if m in members and m != leader)
        if not others:
            return Step(Action.ABORT if late else Action.WAIT,
                        f"member {leader} leads and no other member is in sync")
        return Step(Action.TRANSFER, f"member {leader} leads: transferred first", others[0])
    why = change_refusal(members, leader, in_sync, change)
    if why is not None:
        return Step(Action.ABORT if late else Action.WAIT, why)
    return Step(Action.JOIN, f"{change}: members {list(change.apply(members))} "
                             f"in epoch {epoch + 1}")


def lost_since(since: Mapping[int, float], now: float, replace_after: float) -> frozenset[int]:
    """The pods (or nodes) down (``since``: id -> when first seen so, on the clock of ``now``)
    for ``replace_after`` seconds or more: their members are replaced; none when
    ``replace_after`` is 0 (never replace)."""
    if replace_after <= 0:
        return frozenset()
    return frozenset(o for o, t in since.items() if now - t >= replace_after)


@dataclass(frozen=True, slots=True)
class Next:
    """The next change (None: nothing to do, or nothing can be done) and why."""

    change: Change | None
    why: str


def next_change(desired: int, members: Sequence[int], leader: int, pods: Iterable[Pod],
                load: Load, lost: Collection[int] = ()) -> Next:
    """The next single change that brings the stream to ``desired`` members, every one on a
    pod that is up and staying.

    ``lost``: members whose pod has been gone or not ready for longer than the replacement
    delay; a member on a draining pod (``Pod.draining``: a scale-down, a drain) is moved off
    it. Such a member is replaced first (its replacement catches up before it leaves), then
    removed. Otherwise members are added to or removed from the count. A new member goes on
    a ready pod not draining that holds none of the stream's: the zone holding the fewest of
    its members, then the pod holding the fewest streams, then the lowest ordinal. The
    member removed: a lost one, then one on a draining pod (the leader too: ``change_refusal``
    then asks for its transfer), then a follower whose zone holds the most members, then the
    highest ordinal.
    """
    if desired < 1:
        raise ValueError(f"a stream needs at least one member, not {desired}")
    by_ordinal = {p.ordinal: p for p in pods}
    leaving = {m for m in members if m in by_ordinal and by_ordinal[m].draining}
    unhealthy = (set(lost) | leaving) & set(members)
    healthy = [m for m in members if m not in unhealthy]
    if len(healthy) < desired:
        candidates = [p for p in by_ordinal.values()
                      if p.ready and not p.draining and p.ordinal not in members]
        if not candidates:
            return Next(None, f"{len(healthy)} of {desired} members healthy and no pod can "
                              "take another member")
        zones = _zones(healthy, by_ordinal)
        best = min(candidates, key=lambda p: (
            0 if p.zone is None else zones.get(p.zone, 0), load.hosted.get(p.ordinal, 0),
            p.ordinal))
        why = ("replacing " + ", ".join(f"member {m}" for m in sorted(unhealthy))
               if unhealthy else f"{len(members)} members, {desired} wanted")
        return Next(Change(Kind.ADD, best.ordinal), why)
    if len(members) > desired:
        zones = _zones(members, by_ordinal)

        def order(m: int) -> tuple[int, int, int, int, int]:
            zone = by_ordinal[m].zone if m in by_ordinal else None
            return (m not in set(lost), m not in leaving, m == leader,
                    -(zones.get(zone, 0) if zone is not None else 0), -m)
        victim = min(members, key=order)
        why = (f"member {victim} is lost" if victim in set(lost) else
               f"member {victim} is on a pod being removed" if victim in leaving else
               f"{len(members)} members, {desired} wanted")
        return Next(Change(Kind.REMOVE, victim), why)
    return Next(None, f"{desired} members, every one healthy")


def _zones(members: Iterable[int], pods: Mapping[int, Pod]) -> dict[str, int]:
    zones: dict[str, int] = {}
    for m in members:
        zone = pods[m].zone if m in pods else None
        if zone is not None:
            zones[zone] = zones.get(zone, 0) + 1
    return zones


@dataclass(frozen=True, slots=True)
class Led:
    """What a rebalance needs of a stream: its leader, its members and those in sync."""

    leader: int
    members: tuple[int, ...]
    in_sync: frozenset[int]


def rebalance(streams: Mapping[str, Led], pods: Collection[int]) -> list[tuple[str, int]]:
    """Planned transfers ``(stream, new leader)`` that spread leaderships evenly over ``pods``
    (as ``rabbitmq-queues rebalance``): while a pod leads at least two more streams than
    another member of one of its streams could, one of those streams moves to the in-sync
    member leading the fewest. Each stream moves at most once; streams in name order."""
    count = dict.fromkeys(pods, 0)
    for s in streams.values():
        count[s.leader] = count.get(s.leader, 0) + 1
    moves: list[tuple[str, int]] = []
    moved: set[str] = set()
    while True:
        best: tuple[int, str, int] | None = None
        for name in sorted(streams):
            s = streams[name]
            if name in moved:
                continue
            targets = [m for m in s.members if m != s.leader and m in s.in_sync and m in count]
            if not targets:
                continue
            target = min(targets, key=lambda m: (count[m], m))
            gain = count[s.leader] - count[target]
            if gain >= 2 and (best is None or gain > best[0]):
                best = (gain, name, target)
        if best is None:
            return moves
        _, name, target = best
        count[streams[name].leader] -= 1
        count[target] += 1
        moved.add(name)
        moves.append((name, target))


def preferred_moves(streams: Mapping[str, Led], preferred: Mapping[str, int]
                    ) -> list[tuple[str, int]]:
    """Planned transfers back to each stream's preferred leader (the member placed to lead
    it) once that member is in sync again; streams in name order."""
    return [(name, preferred[name]) for name in sorted(streams)
            if name in preferred and preferred[name] != streams[name].leader
            and preferred[name] in streams[name].members
            and preferred[name] in streams[name].in_sync]
