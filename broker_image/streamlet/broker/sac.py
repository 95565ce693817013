"""Single active consumer: one consumer per (stream, name) receives; the others wait in line.

The broker tells the consumer it activates with a ConsumerUpdate (active=1) and sends it
nothing until the client answers; the answer's offset spec (0 = keep the subscription's own)
sets where it starts. When the active consumer leaves (Unsubscribe, connection lost, stream
deleted) the next one in order of arrival is activated the same way. Subscriptions of a
super-stream partition (``super-stream`` property) form their group on the partition stream,
as in RabbitMQ; streamlet does not rebalance partitions across a group's members (see
docs/protocol.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .subscription import Subscription


class SacGroups:
    def __init__(self) -> None:
        self._groups: dict[tuple[int, str], list[Subscription]] = {}

    def join(self, sub: Subscription, name: str) -> None:
        """Add ``sub`` (which must not deliver yet) to its group; activate it if it is first."""
        key = (id(sub.stream), name)
        group = self._groups.setdefault(key, [])
        group.append(sub)
        sub.sac_key = key
        if len(group) == 1:
            sub.conn.send_consumer_update(sub)

    def leave(self, sub: Subscription) -> None:
        """Remove ``sub``; if it was the active one, activate the next in line."""
        key = sub.sac_key
        if key is None:
            return
        sub.sac_key = None
        group = self._groups.get(key)
        if group is None or sub not in group:
            return
        was_first = group[0] is sub
        group.remove(sub)
        if not group:
            del self._groups[key]
        elif was_first:
            group[0].conn.send_consumer_update(group[0])

    def members(self, sub: Subscription) -> list[Subscription]:
        return list(self._groups.get(sub.sac_key, ())) if sub.sac_key else []
