"""The handshake's handlers (PeerProperties, SASL, Tune, Open, Close, ExchangeCommandVersions)
and the timers that bound it: no Open within ``server.handshake_timeout``, then heartbeats.
Which command may come when is streamlet.rabbitmq.machine's table, applied before these run."""

from __future__ import annotations

import logging

from ... import __version__
from ...rabbitmq import Code, Key
from ...rabbitmq import frames as f
from ...rabbitmq.machine import Outcome
from ..tls import peer_common_name
from . import sasl
from .state import ConnectionState

log = logging.getLogger("streamlet.broker")

#: The version RabbitMQ clients check to enable features (3.13 semantics: v2 frames, filters).
ANNOUNCED_VERSION = "3.13.0"
#: How long a connection refused at Open stays up for the client to close it.
OPEN_REFUSED_LINGER_S = 2.0
_HEARTBEAT = b"\x00\x00\x00\x04\x00\x17\x00\x01"

#: What we advertise in ExchangeCommandVersions, in RabbitMQ's order (rstream reads by position).
COMMAND_VERSIONS = [f.CommandVersion(k, 1, 2 if k == Key.PUBLISH else 1) for k in (
    Key.DECLARE_PUBLISHER, Key.PUBLISH, Key.QUERY_PUBLISHER_SEQUENCE, Key.DELETE_PUBLISHER,
    Key.SUBSCRIBE, Key.CREDIT, Key.STORE_OFFSET, Key.QUERY_OFFSET, Key.UNSUBSCRIBE, Key.CREATE,
    Key.DELETE, Key.METADATA, Key.CLOSE, Key.HEARTBEAT, Key.ROUTE, Key.PARTITIONS,
    Key.STREAM_STATS, Key.CREATE_SUPER_STREAM, Key.DELETE_SUPER_STREAM, Key.RESOLVE_OFFSET_SPEC,
)]


def start(conn: ConnectionState) -> None:
    """A new connection: a peer that never opens is closed."""
    timeout = conn.broker.config.handshake_timeout
    if timeout:
        conn.timer = conn.call_later(timeout, _on_handshake_timeout, conn)


def _on_handshake_timeout(conn: ConnectionState) -> None:
    if not conn.opened and not conn.closing:
        log.info("connection %s: no Open within %ds, closing", conn.peer,
                 conn.broker.config.handshake_timeout)
        conn.fail(Code.ACCESS_REFUSED, "handshake timeout")


def on_peer_properties(conn: ConnectionState, cmd: f.PeerProperties) -> None:
    conn.client_properties = cmd.properties
    conn.send(f.PeerPropertiesResponse(cmd.correlation_id, Code.OK, {
        "product": "streamlet",
        "version": ANNOUNCED_VERSION,  # clients gate features on this, not on the product
        "streamlet_version": __version__,
        "cluster_name": conn.broker.config.cluster_name,
        "platform": "Python / streamlet",
        "copyright": "streamlet authors",
        "information": "streamlet, a RabbitMQ Stream protocol broker, https://streamlet.dev",
        # where this broker's management API listens (0: nowhere), for the CLI's lists
        "streamlet_http_port": str(conn.broker.http_port or 0),
        **({"streamlet_https_port": str(conn.broker.https_port)}  # and over TLS, if it does
           if conn.broker.https_port else {}),
    }))


def mechanisms(conn: ConnectionState) -> list[str]:
    """PLAIN; EXTERNAL too on a TLS connection whose client sent a verified certificate."""
    return sasl.mechanisms(external=certificate_name(conn) is not None)


def certificate_name(conn: ConnectionState) -> str | None:
    if not conn.tls or conn.transport is None:
        return None
    return peer_common_name(conn.transport.get_extra_info("peercert"))


def on_sasl_handshake(conn: ConnectionState, cmd: f.SaslHandshake) -> None:
    conn.send(f.SaslHandshakeResponse(cmd.correlation_id, Code.OK, mechanisms(conn)))


def on_sasl_authenticate(conn: ConnectionState, cmd: f.SaslAuthenticate) -> None:
    if cmd.mechanism not in mechanisms(conn):
        conn.send(f.SaslAuthenticateResponse(cmd.correlation_id, Code.SASL_MECHANISM_NOT_SUPPORTED))
        return
    users = conn.broker.config.users
    if cmd.mechanism == sasl.EXTERNAL:
        code, user = sasl.authenticate_external(users, certificate_name(conn))
    else:
        code, user = sasl.authenticate_plain(users, cmd.data, conn.peer)
    if code == Code.OK and user is not None and _over_user_limit(conn, user):
        code = Code.ACCESS_REFUSED
    conn.send(f.SaslAuthenticateResponse(cmd.correlation_id, code))
    if code != Code.OK:
        log.info("connection %s: authentication failed (code %d)", conn.peer, code)
        conn.abort()
        return
    conn.user = user
    conn.outcome(Outcome.AUTHENTICATED)
    conn.send(f.Tune(conn.frame_max, conn.heartbeat))


def _over_user_limit(conn: ConnectionState, user: str) -> bool:
    cfg = conn.broker.config
    own = next((u.max_connections for u in cfg.users if u.name == user), 0)
    limit = own or cfg.max_connections_per_user
    if limit and conn.broker.user_connections(user) >= limit:
        log.warning("connection %s: user %s is at its limit of %d connections", conn.peer, user, limit)
        return True
    return False


def on_tune(conn: ConnectionState, cmd: f.Tune) -> None:  # after authentication (the table)
    ours, theirs = conn.frame_max, cmd.frame_max
    conn.frame_max = min(ours, theirs) if ours and theirs else ours or theirs
    ours, theirs = conn.heartbeat, cmd.heartbeat
    conn.heartbeat = min(ours, theirs) if ours and theirs else 0


def on_open(conn: ConnectionState, cmd: f.Open) -> None:  # after authentication (the table)
    assert conn.user is not None
    broker = conn.broker
    vhost = broker.vhosts.get(cmd.virtual_host or "/")
    if vhost is None or not broker.access.vhost_allowed(conn.user, vhost.name):
        log.info("connection %s: user %s refused vhost %r", conn.peer, conn.user, cmd.virtual_host)
        conn.send(f.OpenResponse(cmd.correlation_id, Code.VIRTUAL_HOST_ACCESS_FAILURE))
        # let the client read the answer and close first (rstream reports a closed socket
        # instead of the code if the close wins the race); the connection stays unopened
        conn.call_later(OPEN_REFUSED_LINGER_S, conn.abort)
        return
    conn.vhost = vhost
    host, port = advertised(conn)
    conn.outcome(Outcome.OPENED)
    # frame_max is what clients should send; what they do send is taken up to the hard limit
    conn.splitter.max_size = max(conn.frame_max, broker.config.frame_limit)
    if conn.timer:  # the handshake's deadline
        conn.timer.cancel()
        conn.timer = None
    conn.send(f.OpenResponse(cmd.correlation_id, Code.OK, {
        "advertised_host": host, "advertised_port": str(port),
    }))
    if conn.heartbeat:
        conn.timer = conn.call_later(conn.heartbeat, _on_heartbeat_timer, conn)


def _on_heartbeat_timer(conn: ConnectionState) -> None:
    if conn.closing:
        return
    if conn.silent_for() > 2 * conn.heartbeat:
        log.info("connection %s: no heartbeat for %ds, closing", conn.peer, 2 * conn.heartbeat)
        conn.abort()
        return
    conn.write(_HEARTBEAT)
    conn.timer = conn.call_later(conn.heartbeat, _on_heartbeat_timer, conn)


def advertised(conn: ConnectionState) -> tuple[str, int]:
    """Where clients should connect for a stream: the TLS listener for a TLS connection."""
    host, port = conn.broker.config.advertised
    tls = conn.broker.config.tls
    if conn.tls and tls is not None:
        port = tls.advertised_port or tls.port
    return host, port


def on_close(conn: ConnectionState, cmd: f.Close) -> None:
    conn.send(f.CloseResponse(cmd.correlation_id, Code.OK))
    conn.abort()


def on_exchange_command_versions(conn: ConnectionState, cmd: f.ExchangeCommandVersions) -> None:
    for v in cmd.versions:
        if v.key == Key.DELIVER and v.max_version >= 2:
            conn.deliver_v2 = True
    conn.send(f.ExchangeCommandVersionsResponse(cmd.correlation_id, Code.OK, COMMAND_VERSIONS))
