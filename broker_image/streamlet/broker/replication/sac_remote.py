"""The leader's side of a replicated stream's single-active-consumer groups: a member's link
(one connection per stream and epoch, bound by its first SacJoin) and a stand-in for each
consumer it registers. The stand-ins join the leader's own groups (streamlet.core.sac, the same
rules as for local consumers); what the groups tell a stand-in (activate, step down) goes to the
member as a SacUpdate, and the member's SacSteppedDown comes back as ``stepped_down``.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...core.sac import SacGroups
from ...core.streams import Stream
from ...protocol import frames as f


class LinkConnection(Protocol):
    """The connection a member's link arrived on (the RabbitMQ adapter's)."""

    closing: bool

    def send(self, cmd: f.Command) -> None: ...

    def abort(self) -> None: ...


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
                 registry: set[RemoteMember]) -> None:
        self.conn = conn
        self.stream = stream
        self.epoch = epoch
        self.groups = groups
        self.consumers: dict[int, RemoteConsumer] = {}
        self._registry = registry
        registry.add(self)

    def join(self, consumer_id: int, group: str, partition_index: int) -> None:
        if consumer_id in self.consumers:
            return  # joined already (the member never sends it twice; a stand-in is enough)
        consumer = self.consumers[consumer_id] = RemoteConsumer(self, self.stream, consumer_id)
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
            self.conn.send(f.SacUpdate(reader.id, int(active)))

    def close(self) -> None:
        """The link is gone: its consumers leave their groups (others may be activated; the
        member stopped its own before closing the link)."""
        self._registry.discard(self)
        consumers, self.consumers = self.consumers, {}
        for consumer in consumers.values():
            self.groups.leave(consumer)

    def drop(self) -> None:
        """This broker no longer leads the stream in the link's epoch: its consumers are taken
        out of the groups without activating anyone, and the link is closed (the member stops
        them when it sees that, and registers them with the new leader once assigned)."""
        self._registry.discard(self)
        self.groups.withdraw(self.stream)
        self.consumers.clear()
        self.conn.abort()
