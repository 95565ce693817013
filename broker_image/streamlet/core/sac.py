"""Single active consumer: one consumer per (stream, name) receives; the others wait in line.

The group activates a consumer through its session (``ReaderSession.activate``) and the
subscription delivers nothing until the adapter says the client is ready; when the active one
leaves, the next in order of arrival is activated. A partitioned group (``partition_index``)
spreads a super stream's partitions over its consumers, the old active one stepping down before
the new one starts. Members may be stand-ins for another broker's consumers, and a group may be
``defer``-red to a decider elsewhere or ``hold``-ed by a new leader.
Mechanism: docs/replication.md#single-active-consumer-groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol


class Activates(Protocol):
    def activate(self, reader: Any, active: bool) -> None: ...


class Consumer(Protocol):
    """A group member: a subscription, or a leader's stand-in for a member broker's one."""

    active: bool
    sac_key: tuple[int, str] | None

    @property
    def conn(self) -> Activates: ...

    @property
    def stream(self) -> Any: ...  # the core's Stream (its ``deleted``)


class Decider(Protocol):
    """Where the group of a deferred consumer is decided (a replicated stream's leader)."""

    def leave(self, consumer: Any) -> None: ...

    def stepped_down(self, consumer: Any) -> None: ...

    def is_active(self, consumer: Any) -> bool: ...


def active_index(members: int, partition_index: int) -> int | None:
    """Which of a group's ``members`` (in order of arrival) is the active one: the first (first
    come, first served), or for a super stream's partition ``partition_index % members``."""
    if members <= 0:
        return None
    return 0 if partition_index < 0 else partition_index % members


class Withdrawn(NamedTuple):
    """A consumer taken out of its group (``withdraw``): what it joined with and whether it was
    told active (and not yet told to step down)."""

    consumer: Consumer
    name: str
    partition_index: int
    told_active: bool


@dataclass(eq=False)
class _Group:
    partition_index: int  # -1: not a super stream partition (first come, first served)
    members: list[Consumer] = field(default_factory=list)
    #: told active=1 (it may still be waiting for its answer), None if nobody is
    active: Consumer | None = None
    #: told active=0, its answer not yet in: nobody is activated until it is
    stepping_down: Consumer | None = None

    def wanted(self) -> Consumer | None:
        i = active_index(len(self.members), self.partition_index)
        return None if i is None else self.members[i]


class SacGroups:
    def __init__(self) -> None:
        self._groups: dict[tuple[int, str], _Group] = {}
        self._deferred: dict[Consumer, Decider] = {}
        self._held: set[int] = set()  # id(stream): nobody of its groups is activated

    def join(self, sub: Consumer, name: str, partition_index: int = -1) -> None:
        """Add ``sub`` (which must not deliver yet) to its group, and rebalance."""
        key = (id(sub.stream), name)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(partition_index)
        group.members.append(sub)
        sub.sac_key = key
        self._rebalance(group)

    def defer(self, sub: Consumer, name: str, decider: Decider) -> None:
        """``sub``'s group is decided by ``decider``; it is told what to do by other means."""
        self._deferred[sub] = decider
        sub.sac_key = (id(sub.stream), name)

    def undefer(self, sub: Consumer) -> None:
        self._deferred.pop(sub, None)
        sub.sac_key = None

    def leave(self, sub: Consumer) -> None:
        """Remove ``sub``; if it was the active one, the group picks (and activates) another."""
        decider = self._deferred.pop(sub, None)
        if decider is not None:
            sub.sac_key = None
            decider.leave(sub)
            return
        key = sub.sac_key
        if key is None:
            return
        sub.sac_key = None
        group = self._groups.get(key)
        if group is None or sub not in group.members:
            return
        group.members.remove(sub)
        if group.active is sub:
            group.active = None
        if group.stepping_down is sub:
            group.stepping_down = None
        if not group.members:
            del self._groups[key]
        elif not sub.stream.deleted:  # a deleted stream's members are all being dropped
            self._rebalance(group)

    def stepped_down(self, sub: Consumer) -> None:
        """``sub``, told to step down (active=False), has: its client answered."""
        decider = self._deferred.get(sub)
        if decider is not None:
            decider.stepped_down(sub)
            return
        group = self._groups.get(sub.sac_key) if sub.sac_key else None
        if group is not None and group.stepping_down is sub:
            group.stepping_down = None
            self._rebalance(group)

    def is_active(self, sub: Consumer) -> bool:
        """Is ``sub`` (still) the one its group activated? (Its answer may come late.)"""
        decider = self._deferred.get(sub)
        if decider is not None:
            return decider.is_active(sub)
        group = self._groups.get(sub.sac_key) if sub.sac_key else None
        return group is not None and group.active is sub

    def withdraw(self, stream: object) -> list[Withdrawn]:
        """Take every consumer of ``stream``'s groups out, in order of arrival, activating
        nobody: their groups are decided elsewhere from now on (a leader change)."""
        out: list[Withdrawn] = []
        for key in [k for k in self._groups if k[0] == id(stream)]:
            group = self._groups.pop(key)
            for sub in group.members:
                sub.sac_key = None
                out.append(Withdrawn(sub, key[1], group.partition_index, group.active is sub))
        return out

    def hold(self, stream: object) -> None:
        """Activate nobody in ``stream``'s groups until ``release`` (step-downs go on)."""
        self._held.add(id(stream))

    def held(self, stream: object) -> bool:
        return id(stream) in self._held

    def release(self, stream: object) -> None:
        self._held.discard(id(stream))
        for key, group in list(self._groups.items()):
            if key[0] == id(stream):
                self._rebalance(group)

    def _rebalance(self, group: _Group) -> None:
        if group.stepping_down is not None:
            return  # wait for the answer of the one stepping down
        wanted = group.wanted()
        if group.active is wanted:
            return
        current = group.active
        if current is not None:
            group.active = None
            group.stepping_down = current
            current.active = False  # stops delivering now, not when the client answers
            current.conn.activate(current, active=False)
            return
        if wanted is not None and id(wanted.stream) not in self._held:
            group.active = wanted
            wanted.conn.activate(wanted, active=True)
