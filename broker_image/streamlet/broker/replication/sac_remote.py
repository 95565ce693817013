"""The leader's side of a replicated stream's single-active-consumer groups: a member's link
(one connection per stream and epoch, bound by its first SacJoin) and a stand-in for each
consumer it registers. The stand-ins join the leader's own groups (streamlet.core.sac, the same
rules as for local consumers); what the groups tell a stand-in (activate, step down) goes to the
member as a SacUpdate, and the member's SacSteppedDown comes back as ``stepped_down``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ...core.sac import SacGroups
from ...core.streams import Stream
from ...rabbitmq import frames as f
from ...rabbitmq.frames import replication as rf


class LinkConnection(Protocol):
    """The connection a member's link arrived on (the RabbitMQ adapter's)."""

    closing: bool

    def send(self, cmd: f.Command) -> None: ...

    def abort(self) -> None: ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Any: ...


#: How often the leader tells each member's link it is there; a member that hears nothing for
#: ``sac.LEASE_S`` stops its consumers.
KEEPALIVE_S = 0.5

#: Called before a consumer joins the leader's groups: holds them while a new leader must wait.
Gate = Callable[[Stream, SacGroups], None]


class RemoteConsumer:
    """A member's consumer, as a member of the leader's group: it delivers nothing here."""

    __slots__ = ("conn", "stream", "id", "active", "sac_key")

    def __init__(self, link: RemoteMember, stream: Stream, consumer_id: int) -> None:
        self.conn = link
        self.stream = stream
        self.id = consumer_id
        self.active = False
        self.sac_key: tuple[int, str] | None = None


class RemoteMember:
    """One member's link at the leader: its consumers of ``stream`` in ``epoch``."""

    def __init__(self, conn: LinkConnection, stream: Stream, epoch: int, groups: SacGroups,
                 registry: set[RemoteMember], gate: Gate) -> None:
        self.conn = conn
        self.stream = stream
        self.epoch = epoch
        self.groups = groups
        self.consumers: dict[int, RemoteConsumer] = {}
        self._registry = registry
        self._gate = gate
        self._gone = False
        registry.add(self)
        self._keepalive()

    def _keepalive(self) -> None:
        """A Heartbeat now and then: the member's consumers stay active only while it hears
        from this leader (its lease); a dropped link hears nothing more."""
        if not self._gone and not self.conn.closing:
            self.conn.send(f.Heartbeat())
            self.conn.call_later(KEEPALIVE_S, self._keepalive)

    def join(self, consumer_id: int, group: str, partition_index: int) -> None:
        if consumer_id in self.consumers:
            return  # joined already (the member never sends it twice; a stand-in is enough)
        consumer = self.consumers[consumer_id] = RemoteConsumer(self, self.stream, consumer_id)
        self._gate(self.stream, self.groups)
        self.groups.join(consumer, group, partition_index)

    def leave(self, consumer_id: int) -> None:
        consumer = self.consumers.pop(consumer_id, None)
        if consumer is not None:
            self.groups.leave(consumer)

    def stepped_down(self, consumer_id: int) -> None:
        consumer = self.consumers.get(consumer_id)
        if consumer is not None:
            self.groups.stepped_down(consumer)

    def activate(self, reader: Any, active: bool) -> None:
        """What the group decided for ``reader`` (one of ours), told to its member."""
        if not self.conn.closing:
            self.conn.send(rf.SacUpdate(reader.id, int(active)))

    def close(self) -> None:
        """The link is gone: its consumers leave their groups (others may be activated; the
        member stopped its own before closing the link)."""
        self._gone = True
        self._registry.discard(self)
        consumers, self.consumers = self.consumers, {}
        for consumer in consumers.values():
            self.groups.leave(consumer)

    def drop(self) -> None:
        """This broker's role changed: its consumers, already taken out of the groups
        (``SacGroups.withdraw``) without activating anyone, are forgotten and the link is
        closed (the member stops them when it sees that, and registers them again where its
        own role says)."""
        self._gone = True
        self._registry.discard(self)
        self.consumers.clear()
        self.conn.abort()
