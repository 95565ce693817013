"""What the management API lists, read from the broker into plain values (views.py shapes them
into JSON). Read between two events on the broker's loop, so each list is consistent."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...core.streams import Stream
    from ..replication.members import Member
    from ..server import Broker, Client


@dataclass(frozen=True)
class ConnInfo:
    name: str
    protocol: str
    user: str | None
    vhost: str
    state: str
    host: str
    port: int
    peer_host: str
    peer_port: int
    ssl: bool
    frame_max: int | None = None
    heartbeat: int | None = None
    client_properties: dict[str, str] = field(default_factory=dict)
    publishers: int = 0
    consumers: int = 0


@dataclass(frozen=True)
class ReplicationInfo:
    """What this member knows of a replicated stream: its epoch and member ids, whether it
    leads; as the leader, the members in sync and each follower's lag (offsets, chunks,
    bytes; a follower never heard from in this epoch has none)."""

    epoch: int
    members: tuple[int, ...]
    leads: bool
    in_sync: tuple[int, ...] | None = None
    lag: dict[int, tuple[int, int, int]] | None = None


@dataclass(frozen=True)
class StreamInfo:
    vhost: str
    name: str
    max_age_ms: int | None
    max_length_bytes: int | None
    max_segment_size_bytes: int
    filter_size: int
    messages: int
    size_bytes: int
    segments: int
    first_offset: int
    committed_offset: int
    publishers: int
    consumers: int
    writable: bool
    #: "host:port" of the leader (None: being elected) and of every member
    leader: str | None
    members: tuple[str, ...]
    replicated: bool
    messages_in: int
    messages_out: int
    confirmed: int
    #: two leaders seen in one epoch (the last time): epoch, the leader this member knew, the
    #: one claimed (member ids), how many times; None: never
    split_brain: tuple[int, int, int, int] | None = None
    #: None: not replicated
    replication: ReplicationInfo | None = None
    #: the policy that applies (its name and definition; None: none) and what the stream runs
    #: with: max-age ms, max-length-bytes, segment size (the policy over the arguments)
    policy: tuple[str, dict[str, Any]] | None = None
    running: tuple[int | None, int | None, int] | None = None


@dataclass(frozen=True)
class PublisherInfo:
    conn: ConnInfo
    vhost: str
    stream: str
    publisher_id: int
    reference: str | None


@dataclass(frozen=True)
class ConsumerInfo:
    conn: ConnInfo
    vhost: str
    stream: str
    subscription_id: int
    credits: int
    offset: int
    offset_lag: int
    properties: dict[str, str]
    active: bool
    single_active: bool


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ends(conn: Any) -> tuple[tuple[str, int], tuple[str, int]]:
    transport = getattr(conn, "transport", None)
    peer = transport.get_extra_info("peername") if transport is not None else None
    local = transport.get_extra_info("sockname") if transport is not None else None
    return ((peer[0], int(peer[1])) if isinstance(peer, tuple) else ("", 0),
            (local[0], int(local[1])) if isinstance(local, tuple) else ("", 0))


def connection_name(conn: Any) -> str:
    """RabbitMQ's name for a network connection: ``peer:port -> local:port``."""
    (peer_host, peer_port), (host, port) = _ends(conn)
    return f"{address(peer_host, peer_port)} -> {address(host, port)}"


def connection(broker: Broker, conn: Client) -> ConnInfo:
    (peer_host, peer_port), (host, port) = _ends(conn)
    c: Any = conn  # the adapters' own attributes, where they have them
    vhost = getattr(c, "vhost", None)
    state = getattr(c, "state", None)
    opened = bool(getattr(c, "opened", True))
    if getattr(c, "closing", False):
        status = "closing"
    elif state is not None and not opened:
        status = "starting"  # before a RabbitMQ Stream Open
    else:
        status = "running"
    return ConnInfo(
        name=connection_name(conn), protocol=broker.protocol_names.get(type(conn), "other"),
        user=conn.user, vhost=getattr(vhost, "name", "/"), state=status, host=host, port=port,
        peer_host=peer_host, peer_port=peer_port, ssl=bool(getattr(c, "tls", False)),
        frame_max=getattr(c, "frame_max", None), heartbeat=getattr(c, "heartbeat", None),
        client_properties=dict(getattr(c, "client_properties", {}) or {}))


def connections(broker: Broker) -> list[tuple[ConnInfo, Client]]:
    """Every connection with its publisher and consumer counts, by name."""
    pubs: dict[int, int] = {}
    subs: dict[int, int] = {}
    for _, _, stream in streams_of(broker):
        for p in stream.publishers:
            pubs[id(p.conn)] = pubs.get(id(p.conn), 0) + 1
        for r in stream.subscriptions:
            subs[id(r.conn)] = subs.get(id(r.conn), 0) + 1
    out = []
    for conn in broker.connections:
        info = connection(broker, conn)
        info = ConnInfo(**{**info.__dict__, "publishers": pubs.get(id(conn), 0),
                           "consumers": subs.get(id(conn), 0)})
        out.append((info, conn))
    return sorted(out, key=lambda t: t[0].name)


def streams_of(broker: Broker) -> Iterator[tuple[str, str, Stream]]:
    for vhost, v in sorted(broker.vhosts.items()):
        for name, stream in sorted(v.streams.streams.items()):
            yield vhost, name, stream


def stream(broker: Broker, vhost: str, stream: Stream) -> StreamInfo:
    lg, settings = stream.log, stream.settings
    here = broker.config.advertised
    placement = broker.members.placement(stream, here)
    member = broker.members.get(stream)
    seen = member.two_leaders if member is not None else None
    policy, runs = broker.policies.effective(vhost, stream.name), stream.effective
    if placement is None:
        leader: str | None = address(*here)
        members: tuple[str, ...] = (address(*here),)
    else:
        leader = None if placement.leader is None else address(*placement.leader)
        members = tuple(address(*m) for m in placement.members)
    return StreamInfo(
        vhost=vhost, name=stream.name, max_age_ms=settings.max_age_ms,
        max_length_bytes=settings.max_length_bytes,
        max_segment_size_bytes=settings.max_segment_size_bytes, filter_size=settings.filter_size,
        messages=lg.user_record_count(), size_bytes=lg.size_bytes, segments=lg.segment_count,
        first_offset=lg.first_offset, committed_offset=stream.commit_end - 1,
        publishers=len(stream.publishers), consumers=len(stream.subscriptions),
        writable=not (stream.sealed or stream.deleted), leader=leader, members=members,
        replicated=placement is not None, messages_in=stream.messages_in,
        messages_out=stream.messages_out, confirmed=stream.confirmed,
        split_brain=None if seen is None else (seen.epoch, seen.known, seen.claimed, seen.count),
        replication=None if member is None else replication(member),
        policy=None if policy is None else (policy.name, dict(policy.definition)),
        running=(runs.max_age_ms, runs.max_length_bytes, runs.max_segment_size_bytes))


def replication(member: Member) -> ReplicationInfo:
    lead = member.leader
    if lead is None or lead.stopped:
        return ReplicationInfo(member.state.epoch, member.state.members, False)
    lag = {m: behind for m in sorted(set(lead.members) | set(lead.progress)) if m != lead.me
           if (behind := lead.lag(m)) is not None}
    return ReplicationInfo(member.state.epoch, member.state.members, True,
                           tuple(m for m in lead.members if lead.in_sync(m)), lag)


def publishers(broker: Broker, conns: dict[int, ConnInfo]) -> list[PublisherInfo]:
    """Every declared publisher; ``conns``: the connections' infos by ``id(conn)``."""
    out = []
    for vhost, name, s in streams_of(broker):
        for p in s.publishers:
            info = conns.get(id(p.conn))
            if info is not None:  # a replication link's, not a client connection's
                out.append(PublisherInfo(info, vhost, name, p.id, p.reference))
    return sorted(out, key=lambda p: (p.conn.name, p.publisher_id))


def consumers(broker: Broker, conns: dict[int, ConnInfo]) -> list[ConsumerInfo]:
    out = []
    for vhost, name, s in streams_of(broker):
        last = s.commit_end - 1
        for r in s.subscriptions:
            info = conns.get(id(r.conn))
            if info is None:
                continue
            # a RabbitMQ Stream Subscription, or another protocol's reader (RSIO's: demand
            # for credit, no properties)
            x: Any = r
            offset = int(getattr(x, "cursor", 0))
            out.append(ConsumerInfo(
                info, vhost, name, int(getattr(x, "id", 0)),
                int(getattr(x, "credit", getattr(x, "demand", 0))), offset,
                max(last - offset + 1, 0) if last >= 0 else 0,
                dict(getattr(x, "properties", {}) or {}), bool(getattr(x, "active", True)),
                getattr(x, "sac_key", None) is not None))
    return sorted(out, key=lambda c: (c.conn.name, c.subscription_id))
