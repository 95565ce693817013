"""Super streams: CreateSuperStream, DeleteSuperStream, Partitions and Route (a super stream
held by another broker answers from the stream directory)."""

from __future__ import annotations

import logging

from ...core.superstreams import Denial, SuperStream, SuperStreamRefused
from ...protocol import Code
from ...protocol import frames as f
from ..arguments import parse_create_arguments
from ..config import ConfigError
from ..directory import SuperStreamEntry
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
    except ConfigError as e:
        code, why = Code.PRECONDITION_FAILED, str(e)
    else:
        try:
            conn.vhost.create_super_stream(cmd.name, cmd.partitions, cmd.binding_keys,
                                           cmd.arguments, settings)
            code, why = Code.OK, ""
        except SuperStreamRefused as e:
            code, why = DENIAL_CODES[e.reason], e.why
    if code != Code.OK:
        log.info("create super stream %r refused: %s", cmd.name, why)
    conn.send(f.CreateSuperStreamResponse(cmd.correlation_id, code))


def on_delete_super_stream(conn: ConnectionState, cmd: f.DeleteSuperStream) -> None:
    assert conn.vhost is not None
    ss = conn.vhost.superstreams.get(cmd.name)
    if ss is None:
        conn.send(f.DeleteSuperStreamResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST))
        return
    if any(conn.refused("configure", n) for n in (cmd.name, *ss.partitions)):
        conn.send(f.DeleteSuperStreamResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
        return
    deleted = conn.vhost.delete_super_stream(cmd.name) or []  # files gone on return
    conn.send(f.DeleteSuperStreamResponse(cmd.correlation_id, Code.OK))
    for stream in deleted:
        conn.broker.stream_gone(stream)  # one MetadataUpdate per partition


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
