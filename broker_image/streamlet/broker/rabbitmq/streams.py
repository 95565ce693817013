"""Streams: Create, Delete, Metadata (where a stream lives, here or on another broker) and
StreamStats."""

from __future__ import annotations

import logging

from ...core.registry import LimitReached
from ...core.settings import StreamSettings
from ...rabbitmq import Code
from ...rabbitmq import frames as f
from ...rabbitmq.constants import STREAM_DETAILS
from ...replication.placement import Locator, NotEnoughPods
from ..arguments import parse_create_arguments, replication_request, valid_stream_name
from ..config.model import ConfigError, Retention
from ..directory import Address, Placement, answer_metadata
from ..replication.create import Cluster, create_replicated, delete_members, placement_for
from ..replication.forward import FORWARDED
from ..replication.peer import PEER_CONNECTION
from .handshake import advertised
from .replication import cluster_identity
from .state import ConnectionState

log = logging.getLogger("streamlet.broker")


def on_create(conn: ConnectionState, cmd: f.Create) -> None:
    code = _create(conn, cmd)
    if code is not None:
        conn.send(f.CreateResponse(cmd.correlation_id, code))


def _create(conn: ConnectionState, cmd: f.Create) -> Code | None:
    """The answer, or None when a replicated create answers later."""
    why = valid_stream_name(cmd.stream)
    if why is not None:
        log.info("create %r refused: %s", cmd.stream, why)
        return Code.PRECONDITION_FAILED
    if conn.refused("configure", cmd.stream):
        return Code.ACCESS_REFUSED
    existing = conn.streams.get(cmd.stream)
    if existing is not None:
        return _exists(cmd, existing.settings)
    if conn.streams.unreadable_reason(cmd.stream) is not None:
        log.info("create %r refused: its files here were set aside (unreadable)", cmd.stream)
        return Code.STREAM_NOT_AVAILABLE
    try:
        settings = parse_create_arguments(cmd.arguments, conn.broker.config.retention)
        size, locator = replication_request(cmd.arguments)
    except ConfigError as e:
        log.info("create %r refused: %s", cmd.stream, e)
        return Code.PRECONDITION_FAILED
    cluster = conn.broker.cluster
    if size > 1 and cluster is not None:
        return _create_replicated(conn, cmd, cluster, settings, size, locator)
    try:
        conn.streams.create(cmd.stream, settings)
    except LimitReached:  # logged, with why, where it was reached
        return Code.PRECONDITION_FAILED
    except OSError as e:  # the disk's problem, not this connection's
        log.error("create %r failed: %s", cmd.stream, e)
        return Code.INTERNAL_ERROR
    return Code.OK


#: the settings field each Create argument sets, compared when the stream exists
_COMPARED = {"max-age": "max_age_ms", "max-length-bytes": "max_length_bytes",
             "stream-max-segment-size-bytes": "max_segment_size_bytes",
             "stream-filter-size-bytes": "filter_size"}


def _exists(cmd: f.Create, settings: StreamSettings) -> Code:
    """As RabbitMQ: the same arguments answer STREAM_ALREADY_EXISTS, different ones
    PRECONDITION_FAILED. Only the arguments given are compared (the broker's defaults may have
    changed since the stream was made)."""
    try:
        asked = parse_create_arguments(cmd.arguments, Retention())
    except ConfigError as e:
        log.info("create %r refused: %s", cmd.stream, e)
        return Code.PRECONDITION_FAILED
    for arg, field in _COMPARED.items():
        if arg in cmd.arguments and getattr(asked, field) != getattr(settings, field):
            log.info("create %r refused: it exists with %s %s, not %s", cmd.stream, field,
                     getattr(settings, field), cmd.arguments[arg])
            return Code.PRECONDITION_FAILED
    return Code.STREAM_ALREADY_EXISTS


def _create_replicated(conn: ConnectionState, cmd: f.Create, cluster: Cluster,
                       settings: StreamSettings, size: int, locator: Locator) -> Code | None:
    assert conn.vhost is not None
    vhost = conn.vhost
    try:
        placement = placement_for(cluster.peers, cluster.me,
                                  conn.broker.directory(fresh=True), size, locator)
    except NotEnoughPods as e:
        log.info("create %r refused: %s", cmd.stream, e)
        return Code.PRECONDITION_FAILED

    async def create() -> None:
        code = await create_replicated(cluster, vhost, cmd.stream, cmd.arguments, settings,
                                       placement)
        conn.send(f.CreateResponse(cmd.correlation_id, code))

    conn.spawn(create(), f"create {cmd.stream!r}")
    return None


def on_delete(conn: ConnectionState, cmd: f.Delete) -> None:
    held = conn.streams.get(cmd.stream)
    if held is None:
        unreadable = conn.streams.unreadable_reason(cmd.stream) is not None
        conn.send(f.DeleteResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE if unreadable
                                   else Code.STREAM_DOES_NOT_EXIST))
        return
    if conn.refused("configure", cmd.stream):
        conn.send(f.DeleteResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
        return
    assert conn.vhost is not None
    vhost, broker = conn.vhost, conn.broker
    member = broker.members.get(held)
    others = [] if member is None else [m for m in member.state.members
                                        if m != broker.config.member]
    stream = broker.delete_stream(vhost, cmd.stream)  # files gone on return

    def answered() -> None:
        conn.send(f.DeleteResponse(cmd.correlation_id, Code.OK))
        if stream is not None:
            broker.stream_gone(stream)  # MetadataUpdate after the answer

    cluster = broker.cluster
    # Another member passing the Delete on: its name says so, its user proves it (an
    # application naming its connection so still deletes the stream on every member).
    passed_on = conn.client_properties.get("connection_name") in (PEER_CONNECTION, FORWARDED) \
        and cluster_identity(conn)
    if not others or cluster is None or passed_on:
        answered()
        return

    async def delete_everywhere() -> None:  # every member, as RabbitMQ deletes them
        await delete_members(cluster, vhost.name, cmd.stream, others)
        answered()

    conn.spawn(delete_everywhere(), f"delete {cmd.stream!r} on its members")


def on_metadata(conn: ConnectionState, cmd: f.Metadata) -> None:
    assert conn.vhost is not None
    broker = conn.broker
    vhost, directory = conn.vhost.name, broker.directory()
    tls = broker.config.tls if conn.tls else None

    def elsewhere(name: str) -> Address | None:
        """Where the stream directory says a stream not held here lives."""
        address = directory.leader(vhost, name)
        if address is None or address == broker.config.advertised:
            return None  # unknown, or a stale entry naming this broker
        # A Broker's pods share their ports: a TLS client goes to the other pod's TLS port.
        return (address[0], tls.advertised_port or tls.port) if tls else address

    def here(name: str) -> bool:  # a sealed stream moved: the directory names its leader
        stream = conn.streams.get(name)
        return stream is not None and not stream.sealed

    def placement(name: str) -> Placement | None:
        """The directory's entry or this member's own state, whichever has the higher epoch:
        an Assign reaches the members before the directory file reaches every broker."""
        found = directory.placement(vhost, name)
        stream = conn.streams.get(name)
        own = broker.members.placement(stream, advertised(conn)) if stream is not None else None
        if own is None or found is not None and found.epoch > own.epoch:
            return found
        return own

    answer = answer_metadata(cmd.streams, here, advertised(conn), elsewhere, placement)
    for i, (name, code, leader, replicas) in enumerate(answer.streams):
        if code == Code.STREAM_DOES_NOT_EXIST and conn.streams.unreadable_reason(name):
            answer.streams[i] = (name, Code.STREAM_NOT_AVAILABLE, leader, replicas)  # set aside
    for name in cmd.streams:
        stream = conn.streams.get(name)
        if stream is not None:
            stream.watch(conn)
            conn.watching.add(stream)
    conn.send(f.MetadataResponse(
        cmd.correlation_id, [f.BrokerInfo(*b) for b in answer.brokers],
        [f.StreamMetadata(*entry) for entry in answer.streams]))


def on_stream_stats(conn: ConnectionState, cmd: f.StreamStats) -> None:
    stream = conn.streams.get(cmd.stream)
    if stream is None:
        unreadable = conn.streams.unreadable_reason(cmd.stream) is not None
        conn.send(f.StreamStatsResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE
                                        if unreadable else Code.STREAM_DOES_NOT_EXIST))
    elif conn.refused("read", cmd.stream):
        conn.send(f.StreamStatsResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
    else:
        detailed = conn.client_properties.get(STREAM_DETAILS) == "true"
        conn.send(f.StreamStatsResponse(cmd.correlation_id, Code.OK,
                                        stream.details() if detailed else stream.stats()))
