"""The broker: its virtual hosts and streams, its listeners and connections, and a clean
shutdown. It knows protocol adapters only as connection factories (``protocols``, see main.py)
and their connections only as ``Client`` (and the core's session roles)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

from ..core.registry import Limits
from ..core.settings import StreamSettings
from ..core.streams import Stream
from ..core.superstreams import SuperStreamsUnreadable
from ..core.vhosts import VirtualHost
from ..replication.readiness import Readiness, readiness
from .access import AccessControl
from .arguments import parse_create_arguments
from .budget import FrameBudget
from .clock import LoopClock
from .config.model import NO_LIMITS, BrokerConfig, ConfigError, ListenerLimits, Permission, User
from .descriptors import ProcessDescriptors
from .directory import CHECK_INTERVAL_S, EMPTY, Directory, DirectoryFile, seal_changes
from .listening import listen_error
from .memory import TRIM_CHECK_S, return_free_memory, trim_due
from .periodic import every
from .policies.store import Policies
from .replication.create import Cluster
from .replication.fencing import DriverFencing
from .replication.forward import Forwarder
from .replication.members import Members
from .replication.peer import PeerLogin
from .tls import ServerTls

log = logging.getLogger("streamlet.broker")

RETENTION_INTERVAL_S = 60.0


class Client(Protocol):
    """What the broker needs of a connection of any protocol: whose it is, and how to end it."""

    user: str | None

    def abort(self) -> None: ...


#: Makes one connection of a protocol: (the broker, whether the listener is TLS) -> protocol.
ConnectionFactory = Callable[["Broker", bool], asyncio.BaseProtocol]


class Broker:
    def __init__(self, config: BrokerConfig, protocols: Mapping[str, ConnectionFactory]) -> None:
        unknown = sorted({lst.protocol for lst in config.listeners} - set(protocols))
        if unknown:
            raise ConfigError(f"no such protocol: [listeners.{unknown[0]}] "
                              f"(this broker speaks {', '.join(sorted(protocols))})")
        self.protocols = protocols
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.limits = Limits(config.max_streams, config.max_partitions, ProcessDescriptors())
        clock = LoopClock()  # the streams' time and scheduling: the running event loop

        def partition_settings(arguments: Mapping[str, str]) -> StreamSettings:
            return parse_create_arguments(dict(arguments), config.retention)

        try:
            self.vhosts = {name: VirtualHost(name, config.data_dir, config.fsync, self.limits, clock,
                                             partition_settings) for name in config.vhosts}
        except SuperStreamsUnreadable as e:  # the serve command's one-line config error
            raise ConfigError(str(e)) from e
        self.access = AccessControl(config)
        #: the TLS listeners' certificate, replaceable while they listen (reload.py); with
        #: replication over TLS, also the context the links to other brokers are made with
        self.tls = (ServerTls(config.tls, peers=config.replication_tls)
                    if config.tls is not None else None)
        #: how this broker's links log in to the others (over TLS: the reloadable context)
        self.peer_login = PeerLogin(*config.replication_credentials,
                                    tls=self._peer_context if config.replication_tls else None,
                                    peers=config.peers)
        #: the replicated streams this broker is a member of
        self.members = Members(config.member, self.peer_login, config.peers)
        #: the placement driver's fencing tokens: the highest seen, the stale refused
        self.driver_fencing = DriverFencing(config.data_dir)
        self.forwarder = Forwarder(self.peer_login)
        for vhost in self.vhosts.values():
            self.members.load(vhost.streams)  # a state it cannot read sets its stream aside
        #: the policies: kept in the data dir, applied to the streams here, sent to the peers
        self.policies = Policies(config.data_dir, self.vhosts, "{}:{}".format(*config.advertised),
                                 config.peers, config.member,
                                 self.peer_login if config.member is not None else None)
        self.connections: set[Client] = set()
        #: each connection class's protocol (the listener that made one), for the metrics
        self.protocol_names: dict[type, str] = {}
        #: each protocol's budget and deadlines, and its connections open now
        self.listener_limits = {p: config.listener_limits(p) for p in protocols}
        self.listener_connections: Counter[str] = Counter()
        self.frame_budget = FrameBudget(config.frame_budget)
        #: connections closed and read arenas given back since memory was last returned
        self.freed_since_trim = 0
        #: reload.py's outcomes, for the metrics: failed reloads by what ("users", "tls"), and
        #: when each was last applied (time.time(); absent: never reloaded since the start)
        self.reload_failures: Counter[str] = Counter()
        self.reloaded_at: dict[str, float] = {}
        #: the management API's port once it listens (None: off), announced to clients in
        #: PeerProperties (``streamlet_http_port``) so that the CLI's lists find this broker's
        self.http_port: int | None = None
        #: the management API's HTTPS port once it listens (None: none), ``streamlet_https_port``
        self.https_port: int | None = None
        self._servers: list[asyncio.Server] = []
        self._retention_task: asyncio.Task[None] | None = None
        self._trim_task: asyncio.Task[None] | None = None
        self._directory = DirectoryFile(config.directory_file) if config.directory_file else None
        self._sealed_by: Directory | None = None  # the directory the seals were last set from
        self._directory_task: asyncio.Task[None] | None = None

    def _peer_context(self) -> ssl.SSLContext | None:
        return self.tls.client if self.tls is not None else None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.config.resume_roles:
            self.members.resume()
        # One protocol factory per entry of the table, the first (the RabbitMQ port, which
        # clients, probes and tests wait for) opened last: who finds it open finds all open.
        for listener in reversed(self.config.listeners):
            factory, tls = self.protocols[listener.protocol], listener.tls
            try:
                server = await loop.create_server(
                    lambda f=factory, t=tls, p=listener.protocol: self._connection(f, t, p),
                    listener.host, listener.port, backlog=1024, reuse_address=True,
                    ssl=self.tls.listening if tls and self.tls else None)
            except OSError as e:
                raise listen_error(e, f"{listener.protocol}{' TLS' if tls else ''}",
                                   listener.host, listener.port) from e
            self._servers.insert(0, server)  # in the table's order
            for sock in server.sockets:
                log.info("streamlet listening for %s%s on %s", listener.protocol,
                         " (TLS)" if tls else "", sock.getsockname()[:2])
        self._retention_task = asyncio.create_task(self._retention_loop())
        self.policies.start()
        self._trim_task = asyncio.create_task(self._trim_loop())
        if self._directory is not None:
            self._directory_task = asyncio.create_task(self._directory_loop())

    def _connection(self, factory: ConnectionFactory, tls: bool,
                    protocol: str) -> asyncio.BaseProtocol:
        conn = factory(self, tls)
        self.protocol_names.setdefault(type(conn), protocol)
        return conn

    def limits_of(self, conn: object) -> ListenerLimits:
        """The budget and deadlines of the listener that made ``conn`` (NO_LIMITS: none did)."""
        protocol = self.protocol_names.get(type(conn))
        return NO_LIMITS if protocol is None else self.listener_limits[protocol]

    def readiness(self) -> Readiness:
        """Ready once the stream ports listen and no replicated stream it follows is behind
        (streamlet.replication.readiness): the metrics listener's ``/ready``."""
        return readiness(bool(self._servers), self.members.views())

    @property
    def ports(self) -> list[int]:
        return [s.getsockname()[1] for srv in self._servers for s in srv.sockets]

    def delete_stream(self, vhost: VirtualHost, name: str) -> Stream | None:
        """Delete the stream (its files removed on return) and unbind it from its super
        stream; the caller answers, then calls stream_gone (MetadataUpdate after the answer)."""
        stream = vhost.streams.get(name)
        if stream is not None:
            self.members.forget(stream)
        stream = vhost.streams.delete(name)
        if stream is not None:
            vhost.superstreams.forget_partition(name)
        return stream

    @property
    def cluster(self) -> Cluster | None:
        """What a replicated Create needs (None: no cluster.peers, no replicated creates)."""
        cfg = self.config
        if not cfg.peers or cfg.member is None:
            return None
        return Cluster(cfg.peers, cfg.member, self.peer_login, self.members,
                       self._delete_and_tell)

    def _delete_and_tell(self, vhost: VirtualHost, name: str) -> None:
        stream = self.delete_stream(vhost, name)
        if stream is not None:
            self.stream_gone(stream)

    def stream_gone(self, stream: Stream) -> None:
        """Tell every connection that held ``stream`` (MetadataUpdate) and drop what it held."""
        for conn in stream.holders():
            conn.stream_gone(stream)

    def directory(self, fresh: bool = False) -> Directory:
        """Where the streams other brokers hold live (empty without [cluster] directory_file);
        ``fresh``: the file looked at now (a replicated Create places by its loads and zones)."""
        if self._directory is None:
            return EMPTY
        directory = self._directory.current(fresh)
        if directory is not self._sealed_by:
            previous, self._sealed_by = self._sealed_by, directory
            self._apply_seals(previous, directory)
        return directory

    def _apply_seals(self, previous: Directory | None, directory: Directory) -> None:
        """Seal the streams the directory says moved away; unseal those it names here again."""
        here = self.config.advertised
        for vhost in self.vhosts.values():
            streams = vhost.streams.streams
            seal, unseal = seal_changes(previous, directory, vhost.name, streams, here)
            for name in seal:
                stream = streams[name]
                if not stream.sealed:
                    log.info("stream %s moved to %s: sealed here (reads only)", name,
                             directory.leader(vhost.name, name))
                    for conn in {p.conn for p in stream.seal()}:
                        conn.stream_moved(stream)
            for name in unseal:
                if streams[name].sealed:
                    log.info("stream %s is named here again: unsealed", name)
                    streams[name].sealed = False

    async def _directory_loop(self) -> None:
        # A move seals the old stream when the directory changes, without waiting for a client.
        await every(CHECK_INTERVAL_S, self.directory, log, "stream directory check")

    def set_users(self, users: tuple[User, ...], permissions: tuple[Permission, ...]
                  ) -> list[Client]:
        """Authenticate with ``users`` and authorise with ``permissions`` from now on (the
        RabbitMQ handshake and the management API read ``config.users`` at each login, every
        checked operation asks ``access``); both change in one step, with no await between, so
        no login sees a new user without its permissions. Return the open connections of the
        users no longer there, for the caller to close."""
        gone = {u.name for u in self.config.users} - {u.name for u in users}
        self.config = replace(self.config, users=users, permissions=permissions)
        self.access = AccessControl(self.config)
        return [c for c in self.connections if c.user is not None and c.user in gone]

    def user_connections(self, user: str) -> int:
        return sum(1 for c in self.connections if c.user == user)

    async def _trim_loop(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(TRIM_CHECK_S)
            if trim_due(self.freed_since_trim, loop.time() - last):
                self.freed_since_trim = 0
                last = loop.time()
                return_free_memory()

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(RETENTION_INTERVAL_S)
            try:
                for vhost in self.vhosts.values():
                    vhost.streams.apply_retention()
            except OSError as e:
                log.error("retention failed: %s", e)

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        if self._retention_task:
            self._retention_task.cancel()
        if self._trim_task:
            self._trim_task.cancel()
        if self._directory_task:
            self._directory_task.cancel()
        self.members.close()
        await self.policies.close()
        await self.forwarder.close()
        for conn in list(self.connections):
            conn.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        for vhost in self.vhosts.values():
            vhost.close()
        log.info("streamlet stopped")
