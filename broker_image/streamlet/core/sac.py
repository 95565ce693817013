"""Single active consumer: one consumer per (stream, name) receives; the others wait in line.

The group tells the consumer it activates through its session (``Session.activate``: the
RabbitMQ adapter sends a ConsumerUpdate, active=1), and the subscription delivers nothing until
the adapter says the client is ready (the answer's offset spec decides where it starts). When
the active consumer leaves (unsubscribed, its connection lost, its stream deleted) the next one
in order of arrival is activated the same way.

A group joined with a ``partition_index`` (RabbitMQ: the ``super-stream`` property, on a
partition of that super stream) is a partitioned group: the active member is
``members[index % len(members)]`` where ``index`` is the partition's position in the super
stream, so the partitions spread over the group's consumers. When a join or a leave moves that
choice, the current active one is first told to step down (active=False); the new one is
activated once it has (``stepped_down``) or it leaves, so two consumers never deliver at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .subscription import Subscription


@dataclass(eq=False)
class _Group:
    partition_index: int  # -1: not a super stream partition (first come, first served)
    members: list[Subscription] = field(default_factory=list)
    #: told active=1 (it may still be waiting for its answer), None if nobody is
    active: Subscription | None = None
    #: told active=0, its answer not yet in: nobody is activated until it is
    stepping_down: Subscription | None = None

    def wanted(self) -> Subscription | None:
        if not self.members:
            return None
        if self.partition_index < 0:
            return self.members[0]
        return self.members[self.partition_index % len(self.members)]


class SacGroups:
    def __init__(self) -> None:
        self._groups: dict[tuple[int, str], _Group] = {}

    def join(self, sub: Subscription, name: str, partition_index: int = -1) -> None:
        """Add ``sub`` (which must not deliver yet) to its group, and rebalance."""
        key = (id(sub.stream), name)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(partition_index)
        group.members.append(sub)
        sub.sac_key = key
        self._rebalance(group)

    def leave(self, sub: Subscription) -> None:
        """Remove ``sub``; if it was the active one, the group picks (and activates) another."""
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

    def stepped_down(self, sub: Subscription) -> None:
        """``sub``, told to step down (active=False), has: its client answered."""
        group = self._groups.get(sub.sac_key) if sub.sac_key else None
        if group is not None and group.stepping_down is sub:
            group.stepping_down = None
            self._rebalance(group)

    def is_active(self, sub: Subscription) -> bool:
        """Is ``sub`` (still) the one its group activated? (Its answer may come late.)"""
        group = self._groups.get(sub.sac_key) if sub.sac_key else None
        return group is not None and group.active is sub

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
        if wanted is not None:
            group.active = wanted
            wanted.conn.activate(wanted, active=True)
