"""Single-active-consumer groups of replicated streams, decided at the stream's leader.

A ``StreamSac`` keeps this broker's single active consumers of one replicated stream and puts
them where this member's role says: the leader's own groups (beside stand-ins for the other
members' consumers), the leader's groups over a ``SacLink`` (on a follower), or nowhere while
fenced. A consumer is active only while the link to the leader that activated it is up and that
leader is heard from, and a new leader decides only once every consumer an earlier one activated
has stopped: two consumers never deliver at once.
Mechanism: docs/replication.md#single-active-consumer-groups.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ...core.sac import SacGroups
from ...core.streams import Stream
from ...core.subscription import Subscription
from ...rabbitmq import Code
from ...rabbitmq import frames as f
from ...rabbitmq.frames import replication as rf
from ..directory import Address
from .member import MemberState, Role
from .peer import Peer, PeerLogin, open_peer
from .sac_remote import KEEPALIVE_S, Gate, LinkConnection, RemoteConsumer, RemoteMember

log = logging.getLogger("streamlet.broker")

BACKOFF_S = (0.1, 2.0)
#: A member's consumers stay active while it hears from the leader (a keepalive every
#: KEEPALIVE_S); after this long without a word it stops them.
LEASE_S = 4 * KEEPALIVE_S
#: A leader in a new epoch activates nobody for this long: any consumer an earlier leader
#: activated has stopped by then (its lease ran out, or it heard of the new epoch).
HOLD_S = LEASE_S + 0.5
#: The connection_name of a member's link to its leader.
SAC_CONNECTION = "streamlet sac"


class LinkRefused(Exception):
    """The leader refused a join (it does not lead that epoch, or the link is not allowed)."""


@dataclass(eq=False)
class _Entry:
    id: int
    sub: Subscription
    name: str
    partition_index: int
    active: bool = False  # the leader said active=1, and nothing since
    asked_down: bool = False  # the leader said active=0: the client's answer goes back


def _stop(sub: Subscription, tell: bool = True) -> None:
    """Deliver nothing more and tell the client it is passive (ConsumerUpdate active=0)."""
    sub.active = False
    if tell:
        sub.conn.activate(sub, False)


class StreamSac:
    """This broker's single active consumers of one replicated stream."""

    def __init__(self, stream: Stream, groups: SacGroups, vhost: str,
                 credentials: PeerLogin, ids: Iterator[int], gate: Gate) -> None:
        self.stream = stream
        self.groups = groups
        self.vhost = vhost
        self.credentials = credentials
        self._ids = ids
        self._gate = gate
        self.state: MemberState | None = None
        self.entries: dict[Subscription, _Entry] = {}  # in order of arrival
        self.link: SacLink | None = None

    def join(self, sub: Subscription, name: str, partition_index: int) -> None:
        if self.state is not None and self.state.role is Role.LEADER:
            self._gate(self.stream, self.groups)
            self.groups.join(sub, name, partition_index)  # decided here, with the others'
            return
        entry = self.entries[sub] = _Entry(next(self._ids), sub, name, partition_index)
        self.groups.defer(sub, name, self)
        if self.link is not None:
            self.link.join(entry)

    # --- the core's Decider: what this broker's connections say of a deferred consumer --------

    def leave(self, sub: Subscription) -> None:
        entry = self.entries.pop(sub, None)
        if entry is not None and self.link is not None:
            self.link.send(rf.SacLeave(entry.id))

    def stepped_down(self, sub: Subscription) -> None:
        entry = self.entries.get(sub)
        if entry is not None and entry.asked_down:
            entry.asked_down = False
            if self.link is not None:
                self.link.send(rf.SacSteppedDown(entry.id))

    def is_active(self, sub: Subscription) -> bool:
        entry = self.entries.get(sub)
        return entry is not None and entry.active

    # --- what the leader says --------------------------------------------------------------------

    def update(self, consumer_id: int, active: bool) -> None:
        entry = next((e for e in self.entries.values() if e.id == consumer_id), None)
        if entry is None:
            return  # it left meanwhile (its SacLeave is on the way)
        entry.active, entry.asked_down = active, not active
        if active:
            entry.sub.conn.activate(entry.sub, True)  # it delivers once the client answers
        else:
            _stop(entry.sub)

    def link_lost(self, tell: bool = True) -> None:
        """No leader to decide: every consumer here stops, and waits."""
        for entry in self.entries.values():
            entry.asked_down = False
            if entry.active or entry.sub.active:
                entry.active = False
                _stop(entry.sub, tell)

    # --- this member's role changed ----------------------------------------------------------------

    def changed(self, state: MemberState | None) -> None:
        """A Fence, an Assign, or the stream forgotten (None): whatever was decided stops
        here, before the consumers are registered where the new role says. (A stream
        forgotten is being deleted: its consumers are stopped without a word, MetadataUpdate
        follows.)"""
        self.state = None
        tell = state is not None
        if self.link is not None:
            self.link.stop()
            self.link = None
        self.link_lost(tell)
        consumers = []
        for w in self.groups.withdraw(self.stream):  # when it led: its groups, stand-ins too
            if isinstance(w.consumer, RemoteConsumer):
                continue  # their links are closed (ReplicatedSac.changed)
            assert isinstance(w.consumer, Subscription)
            if w.told_active or w.consumer.active:
                _stop(w.consumer, tell)
            consumers.append((w.consumer, w.name, w.partition_index))
        for entry in self.entries.values():
            self.groups.undefer(entry.sub)
            consumers.append((entry.sub, entry.name, entry.partition_index))
        self.entries.clear()
        self.enter(state)
        for sub, name, index in consumers:
            self.join(sub, name, index)

    def enter(self, state: MemberState | None) -> None:
        """Decide where this member's consumers go from now on (a follower: a link)."""
        self.state = state
        if state is not None and state.role is Role.FOLLOWER and state.leader is not None:
            self.link = SacLink(self, state.leader, state.epoch)
            self.link.start()


class SacLink:
    """A follower's link to its leader for one stream's groups, in one epoch; retried with a
    backoff while this member keeps that role. Its consumers are inactive while it is down."""

    def __init__(self, owner: StreamSac, leader: Address, epoch: int) -> None:
        self.owner = owner
        self.leader = leader
        self.epoch = epoch
        self.peer: Peer | None = None
        self.stopped = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        """The caller stops the consumers; nothing this link hears from now on counts."""
        self.stopped = True
        self.peer = None
        if self._task is not None:
            self._task.cancel()  # its connection is closed as the task ends
            self._task = None

    def send(self, cmd: f.Command) -> None:
        if self.peer is not None and not self.stopped:
            self.peer.send(cmd)

    def join(self, entry: _Entry) -> None:
        if self.peer is not None and not self.stopped:
            self.peer.send(rf.SacJoin(self.peer.next_corr(), self.owner.stream.name, self.epoch,
                                     entry.id, entry.name, entry.partition_index))

    async def _run(self) -> None:
        backoff = BACKOFF_S[0]
        while not self.stopped:
            try:
                await self._serve()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the link's problem: retried
                log.info("stream %s: single-active-consumer link to %s:%d (epoch %d) lost: %s",
                         self.owner.stream.name, *self.leader, self.epoch, e)
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, BACKOFF_S[1])

    async def _serve(self) -> None:
        async with open_peer(self.leader, self.owner.credentials, SAC_CONNECTION,
                             self.owner.vhost) as peer:
            try:
                if self.stopped:
                    return
                self.peer = peer
                for entry in list(self.owner.entries.values()):
                    self.join(entry)
                while True:
                    try:
                        frame = await asyncio.wait_for(peer.frame(), LEASE_S)
                    except TimeoutError:
                        raise LinkRefused(f"no word from the leader for {LEASE_S} s") from None
                    cmd = f.decode(frame)
                    if isinstance(cmd, rf.SacUpdate):
                        self.owner.update(cmd.consumer, bool(cmd.active))
                    elif isinstance(cmd, rf.SacJoinResponse) and cmd.code != Code.OK:
                        raise LinkRefused(f"join refused: code {cmd.code}")
                    elif isinstance(cmd, f.Close):
                        raise LinkRefused(f"closed by the leader: {cmd.reason} (code {cmd.code})")
                    elif isinstance(cmd, f.FrameError):
                        raise LinkRefused(f"bad frame from the leader: {cmd.reason}")
            finally:
                # Stop the consumers before the link closes: the leader picks others once it
                # sees it closed.
                self.peer = None
                if not self.stopped:
                    self.owner.link_lost()


class ReplicatedSac:
    """Every replicated stream's groups this broker has a part in: its own consumers'
    (``StreamSac``) and, where it leads, the other members' links (``RemoteMember``)."""

    def __init__(self, credentials: PeerLogin) -> None:
        self.credentials = credentials
        self.streams: dict[Stream, StreamSac] = {}
        self.remotes: dict[Stream, set[RemoteMember]] = {}
        self._ids = itertools.count(1)
        #: when this broker became the leader of a stream, in its current epoch
        self._since: dict[Stream, float] = {}
        self._holds: dict[Stream, object] = {}  # a hold's token, until its release

    def join(self, sub: Subscription, name: str, partition_index: int, groups: SacGroups,
             vhost: str, state: MemberState) -> None:
        """A consumer of a replicated stream on this member, in the member's ``state``."""
        here = self.streams.get(sub.stream)
        if here is None:
            here = self.streams[sub.stream] = StreamSac(sub.stream, groups, vhost,
                                                        self.credentials, self._ids, self.gate)
            here.enter(state)
        here.join(sub, name, partition_index)

    def link(self, conn: LinkConnection, stream: Stream, epoch: int,
             groups: SacGroups) -> RemoteMember:
        """A member's link arrived here, the leader of ``stream`` in ``epoch``."""
        return RemoteMember(conn, stream, epoch, groups, self.remotes.setdefault(stream, set()),
                            self.gate)

    def gate(self, stream: Stream, groups: SacGroups) -> None:
        """Before a consumer joins this leader's groups: within HOLD_S of the epoch's start
        they are held (a timer releases them)."""
        since = self._since.get(stream)
        wait = HOLD_S - (time.monotonic() - since) if since is not None else 0.0
        if stream in self._holds:
            return  # its timer releases it
        if wait <= 0:
            if groups.held(stream):  # a hold of an earlier role, its timer void
                groups.release(stream)
            return
        token = self._holds[stream] = object()
        groups.hold(stream)
        asyncio.get_running_loop().call_later(wait, self._release, stream, groups, token)

    def _release(self, stream: Stream, groups: SacGroups, token: object) -> None:
        if self._holds.get(stream) is token:
            del self._holds[stream]
            groups.release(stream)

    def changed(self, stream: Stream, state: MemberState | None) -> None:
        """This member's state for ``stream`` changed (None: the stream is forgotten). Every
        group of the stream is decided afresh: what this broker decided is withdrawn and the
        other members' links to it are closed (those still following it in the same epoch
        join again; the others register with their new leader)."""
        remotes = self.remotes.pop(stream, set())
        self._holds.pop(stream, None)  # a new hold (and timer) comes with the next join
        if state is not None and state.role is Role.LEADER:
            self._since[stream] = time.monotonic()
        else:
            self._since.pop(stream, None)
        here = self.streams.get(stream)
        if here is not None:
            here.changed(state)  # its groups withdrawn, the stand-ins with them
            if state is None:
                del self.streams[stream]
        elif remotes:
            next(iter(remotes)).groups.withdraw(stream)  # the stand-ins only: none of ours
        for remote in list(remotes):
            remote.drop()

    def close(self) -> None:
        for here in self.streams.values():
            if here.link is not None:
                here.link.stop()
        self.streams.clear()
