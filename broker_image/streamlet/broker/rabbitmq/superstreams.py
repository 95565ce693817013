"""Super streams: CreateSuperStream, DeleteSuperStream, Partitions and Route (a super stream
held by another broker answers from the stream directory). With ``initial-cluster-size`` > 1
on a broker with peers, each partition is a replicated stream, the partitions' leaders spread
across the brokers (broker.replication.create)."""

from __future__ import annotations

import logging

from ...core.settings import StreamSettings
from ...core.superstreams import Denial, SuperStream, SuperStreamRefused
from ...rabbitmq import Code
from ...rabbitmq import frames as f
from ...replication.placement import NotEnoughPods
from ..arguments import parse_create_arguments, replication_request
from ..config.model import ConfigError
from ..directory import SuperStreamEntry
from ..replication.create import (
    Cluster,
    create_replicated_super_stream,
    delete_members,
    super_stream_placements,
)
from .state import ConnectionState

log = logging.getLogger("streamlet.broker")

#: The core's reasons for refusing a super stream, as this protocol's codes.
DENIAL_CODES = {Denial.INVALID: Code.PRECONDITION_FAILED, Denial.EXISTS: Code.STREAM_ALREADY_EXISTS,
                Denial.LIMIT: Code.PRECONDITION_FAILED, Denial.FAILED: Code.INTERNAL_ERROR}


def on_create_super_stream(conn: ConnectionState, cmd: f.CreateSuperStream) -> None:
    assert conn.vhost is not None
    if any(conn.refused("configure", n) for n in (cmd.name, *cmd.partitions)):
        conn.send(f.CreateSuperStreamResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
        return
    try:
        settings = parse_create_arguments(cmd.arguments, conn.broker.config.retention)
        size, _ = replication_request(cmd.arguments)
    except ConfigError as e:
        code, why = Code.PRECONDITION_FAILED, str(e)
    else:
        cluster = conn.broker.cluster
        if size > 1 and cluster is not None:
            _create_replicated(conn, cmd, cluster, settings, size)
            return
        try:
            conn.vhost.create_super_stream(cmd.name, cmd.partitions, cmd.binding_keys,
                                           cmd.arguments, settings)
            code, why = Code.OK, ""
        except SuperStreamRefused as e:
            code, why = DENIAL_CODES[e.reason], e.why
    if code != Code.OK:
        log.info("create super stream %r refused: %s", cmd.name, why)
    conn.send(f.CreateSuperStreamResponse(cmd.correlation_id, code))


def _create_replicated(conn: ConnectionState, cmd: f.CreateSuperStream, cluster: Cluster,
                       settings: StreamSettings, size: int) -> None:
    """Partitions with ``size`` members each, their leaders spread (answered once made)."""
    assert conn.vhost is not None
    vhost = conn.vhost
    try:
        vhost.check_super_stream(cmd.name, cmd.partitions, cmd.binding_keys)
        placements = super_stream_placements(
            cluster.peers, conn.broker.directory(fresh=True), size, len(cmd.partitions))
    except SuperStreamRefused as e:
        log.info("create super stream %r refused: %s", cmd.name, e.why)
        conn.send(f.CreateSuperStreamResponse(cmd.correlation_id, DENIAL_CODES[e.reason]))
        return
    except NotEnoughPods as e:
        log.info("create super stream %r refused: %s", cmd.name, e)
        conn.send(f.CreateSuperStreamResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
        return

    async def create() -> None:
        code = await create_replicated_super_stream(
            cluster, vhost, cmd.name, cmd.partitions, cmd.binding_keys, cmd.arguments, settings,
            placements)
        conn.send(f.CreateSuperStreamResponse(cmd.correlation_id, code))

    conn.spawn(create(), f"create super stream {cmd.name!r}")


def on_delete_super_stream(conn: ConnectionState, cmd: f.DeleteSuperStream) -> None:
    assert conn.vhost is not None
    ss = conn.vhost.superstreams.get(cmd.name)
    if ss is None:
        conn.send(f.DeleteSuperStreamResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST))
        return
    if any(conn.refused("configure", n) for n in (cmd.name, *ss.partitions)):
        conn.send(f.DeleteSuperStreamResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
        return
    vhost, broker = conn.vhost, conn.broker
    for partition in ss.partitions:  # a replicated partition's member here stops first
        if (stream := vhost.streams.get(partition)) is not None:
            broker.members.forget(stream)
    deleted = vhost.delete_super_stream(cmd.name) or []  # files gone on return

    def answered() -> None:
        conn.send(f.DeleteSuperStreamResponse(cmd.correlation_id, Code.OK))
        for stream in deleted:
            broker.stream_gone(stream)  # one MetadataUpdate per partition

    cluster = broker.cluster
    if cluster is None or not _replicated(ss):
        answered()
        return

    async def delete_everywhere() -> None:  # each partition on every broker that has it
        others = [m for m in range(len(cluster.peers)) if m != cluster.me]
        for partition in ss.partitions:
            await delete_members(cluster, vhost.name, partition, others, missing_ok=True)
        answered()

    conn.spawn(delete_everywhere(), f"delete super stream {cmd.name!r} on its members")


def _replicated(ss: SuperStream) -> bool:
    try:
        return replication_request(dict(ss.arguments))[0] > 1
    except ConfigError:
        return False


def _find(conn: ConnectionState, name: str) -> SuperStream | SuperStreamEntry | None:
    """The super stream here, or held elsewhere (the directory knows it, and its partitions)."""
    assert conn.vhost is not None
    return conn.vhost.superstreams.get(name) or conn.broker.directory().super_stream(
        conn.vhost.name, name)


def on_partitions(conn: ConnectionState, cmd: f.Partitions) -> None:
    ss = _find(conn, cmd.super_stream)
    if ss is None:
        conn.send(f.PartitionsResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, []))
    else:
        conn.send(f.PartitionsResponse(cmd.correlation_id, Code.OK, list(ss.partitions)))


def on_route(conn: ConnectionState, cmd: f.Route) -> None:
    ss = _find(conn, cmd.super_stream)
    if ss is None:
        conn.send(f.RouteResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, []))
    else:
        conn.send(f.RouteResponse(cmd.correlation_id, Code.OK, ss.route(cmd.routing_key)))
