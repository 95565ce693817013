"""A Create asking for ``initial-cluster-size`` > 1 members, as RabbitMQ clients send it: the
members are placed among ``cluster.peers`` by the pure placement rule (the leader per
``queue-leader-locator``: client-local, the default, is the broker that received the Create),
the stream is created on each of them, and epoch 1 is assigned: the leader first, then its
followers, which connect to it. The Create is answered once all of that is done; if a member
cannot be made, what was made is deleted again and the answer is 6 (not available).

More members than brokers are asked for: every broker gets one, as RabbitMQ does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.settings import StreamSettings
from ...rabbitmq import Code
from ...rabbitmq import frames as f
from ...rabbitmq.constants import Role as WireRole
from ...rabbitmq.frames import replication as rf
from ...replication.placement import Load, Locator, Placement, Pod, place, place_super_stream
from ..arguments import PLACEMENT
from ..directory import Address
from .member import Role
from .peer import PeerLogin, open_peer

if TYPE_CHECKING:
    from ...core.vhosts import VirtualHost
    from ..directory import Directory
    from .members import Members

log = logging.getLogger("streamlet.broker")


@dataclass(frozen=True)
class Cluster:
    """What a replicated create needs of the broker: every member's address (by member id),
    this broker's id, the replication user's credentials, this broker's members, and how to
    delete a stream here (the broker's delete: its watchers are told)."""

    peers: tuple[Address, ...]
    me: int
    credentials: PeerLogin
    members: Members
    delete: Callable[[VirtualHost, str], None]


def _load(peers: tuple[Address, ...], directory: Directory) -> Load:
    """The brokers' loads as the stream directory shows them."""
    index = {address: i for i, address in enumerate(peers)}
    load = Load()
    for placement in directory.replicated.values():
        members = [index[a] for a in placement.members if a in index]
        if placement.leader in index:
            load.add(Placement(index[placement.leader], tuple(members)))
    return load


def _pods(peers: tuple[Address, ...], directory: Directory) -> list[Pod]:
    """Every peer as placement sees it: its zone from the directory (none when not known)."""
    return [Pod(i, directory.zones.get(i)) for i in range(len(peers))]


def placement_for(peers: tuple[Address, ...], me: int, directory: Directory, size: int,
                  locator: Locator) -> Placement:
    """Where the members go."""
    return place(_pods(peers, directory), min(size, len(peers)), _load(peers, directory),
                 locator, receiving=me)


def super_stream_placements(peers: tuple[Address, ...], directory: Directory, size: int,
                            partitions: int) -> list[Placement]:
    """Where each partition's members go: balanced, so the partitions' leaders spread across
    the brokers whatever broker received the create."""
    return place_super_stream(_pods(peers, directory), partitions, min(size, len(peers)),
                              _load(peers, directory))


async def create_replicated(cluster: Cluster, vhost: VirtualHost, name: str,
                            arguments: dict[str, str], settings: StreamSettings,
                            placement: Placement) -> Code:
    peers, me, credentials = cluster.peers, cluster.me, cluster.credentials
    plain = {k: v for k, v in arguments.items() if k not in PLACEMENT}  # no recursion
    made: list[int] = []
    try:
        for m in placement.members:
            if m == me:
                vhost.streams.create(name, settings)
            else:
                await _ask(peers[m], credentials, vhost.name, lambda c: f.Create(c, name, plain),
                           f.CreateResponse)
            made.append(m)
        leader = peers[placement.leader]
        for m in placement.members:  # the leader first: its followers connect to it
            role = WireRole.LEADER if m == placement.leader else WireRole.FOLLOWER
            if m == me:
                stream = vhost.streams.get(name)
                assert stream is not None
                cluster.members.assign(stream, 1, Role(role.name.lower()), leader,
                                       placement.members)
            else:
                await _ask(peers[m], credentials, vhost.name, lambda c, r=role: rf.Assign(
                    c, name, 1, r, leader[0], leader[1], list(placement.members)),
                    rf.AssignResponse)
    except Exception as e:
        log.warning("create %r with members %s failed at member %s: %s; undoing", name,
                    placement.members, placement.members[len(made)] if len(made) < len(
                        placement.members) else "assign", e)
        await _undo(cluster, vhost, name, made)
        return Code.STREAM_NOT_AVAILABLE
    log.info("stream %s created with members %s, led by %d", name, placement.members,
             placement.leader)
    return Code.OK


async def create_replicated_super_stream(
        cluster: Cluster, vhost: VirtualHost, name: str, partitions: list[str],
        binding_keys: list[str], arguments: dict[str, str], settings: StreamSettings,
        placements: list[Placement]) -> Code:
    """Each partition made as a replicated stream on its members, then the super stream's
    record here (the receiving broker answers Partitions and Route; the placement driver's
    directory tells the others). A partition that cannot be made undoes those made before."""
    made: list[tuple[str, Placement]] = []
    for partition, placement in zip(partitions, placements, strict=True):
        code = await create_replicated(cluster, vhost, partition, arguments, settings, placement)
        if code != Code.OK:
            for done, where in made:
                if cluster.me in where.members:
                    cluster.delete(vhost, done)
                await delete_members(cluster, vhost.name, done, list(where.members))
            return code
        made.append((partition, placement))
    vhost.record_super_stream(name, partitions, binding_keys, arguments)
    log.info("super stream %s created: %s", name, ", ".join(
        f"{p} led by {pl.leader}" for p, pl in made))
    return Code.OK


async def make_learner(cluster: Cluster, vhost: str, name: str, arguments: dict[str, str],
                       member: int, epoch: int, leader: Address,
                       members: tuple[int, ...]) -> None:
    """As the leader of ``epoch``: make ``member`` a learner of ``name``, its copy created with
    this stream's settings (a copy it still holds is kept: its link truncates it to a prefix
    of this log), then assigned follower of this epoch outside the member set. Raises when
    that member does not take it."""
    address = cluster.peers[member]
    await _ask(address, cluster.credentials, vhost, lambda c: f.Create(c, name, arguments),
               f.CreateResponse, (Code.OK, Code.STREAM_ALREADY_EXISTS))
    await _ask(address, cluster.credentials, vhost, lambda c: rf.Assign(
        c, name, epoch, WireRole.FOLLOWER, leader[0], leader[1], list(members)),
        rf.AssignResponse)
    log.info("stream %s: member %d is a learner in epoch %d", name, member, epoch)


async def _ask(address: Address, credentials: PeerLogin, vhost: str, make: object,
               kind: type[f.Command], ok: tuple[int, ...] = (Code.OK,)) -> None:
    async with open_peer(address, credentials, vhost=vhost) as peer:
        answer = await peer.request(make(peer.next_corr()), kind)  # type: ignore[operator]
        code = getattr(answer, "code", None)
        if code not in ok:
            raise RuntimeError(f"{kind.__name__} from {address[0]}:{address[1]}: code {code}")


async def _undo(cluster: Cluster, vhost: VirtualHost, name: str, made: list[int]) -> None:
    peers = cluster.peers
    for m in made:
        try:
            if m == cluster.me:
                cluster.delete(vhost, name)
            else:
                await _ask(peers[m], cluster.credentials, vhost.name,
                           lambda c: f.Delete(c, name), f.DeleteResponse)
        except Exception as e:  # best effort: the stream stays there, and is logged
            log.error("create %r: cannot delete the member on %s: %s", name, peers[m], e)


async def delete_members(cluster: Cluster, vhost: str, name: str, ids: list[int],
                         missing_ok: bool = False) -> None:
    """A replicated stream deleted here: delete it on its other members too, as RabbitMQ
    deletes every member. One that cannot be reached keeps its copy (logged); it holds no
    leader and the placement driver forgets a stream most members no longer have.
    ``missing_ok``: a broker without it is no error (ids that may not all be members)."""
    ok = (Code.OK, Code.STREAM_DOES_NOT_EXIST) if missing_ok else (Code.OK,)
    for m in ids:
        if m == cluster.me or m >= len(cluster.peers):
            continue
        try:
            await _ask(cluster.peers[m], cluster.credentials, vhost, lambda c: f.Delete(c, name),
                       f.DeleteResponse, ok)
        except Exception as e:
            log.error("delete %r: cannot delete the member on %s:%d: %s", name,
                      *cluster.peers[m], e)
