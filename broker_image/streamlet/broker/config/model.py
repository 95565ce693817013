"""The configuration's model: what a broker is configured with (BrokerConfig and its parts),
the defaults, and ConfigError. Values only: reading.py builds them from a file, the
environment and flags; a further protocol's own settings are its adapter's (``settings``, by
protocol name, the rows of broker/protocols.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

DEFAULT_PORT = 5552
DEFAULT_TLS_PORT = 5551
DEFAULT_FRAME_MAX = 1_048_576
#: RabbitMQ does not hold clients to the frame_max it tuned (3.10.8 confirmed a 64 MB Publish
#: frame after agreeing on 1 MiB), and clients rely on it: rstream's send_batch sends one
#: Publish frame whatever its size. So a frame past frame_max is taken up to this hard limit,
#: which bounds what one connection can make the broker buffer (a 100,000-message batch of
#: 150 B fits); past it, code 14 and a close.
DEFAULT_FRAME_LIMIT = 16 << 20
DEFAULT_HEARTBEAT = 60
#: As RabbitMQ's stream request_timeout: a connection that leaves a request to the client (a
#: ConsumerUpdate) unanswered this long is closed, so a single-active-consumer group never
#: waits forever for a consumer that does not step down.
DEFAULT_REQUEST_TIMEOUT = 60
#: An incomplete frame after Open must complete within this many seconds of its first byte (a
#: 16 MiB frame then needs ~280 KB/s): a peer trickling bytes cannot hold a buffer for ever.
DEFAULT_FRAME_TIMEOUT = 60
DEFAULT_MAX_CONNECTIONS = 10_000
DEFAULT_MAX_STREAMS = 10_000
DEFAULT_MAX_PARTITIONS = 1_000
#: Bytes of incomplete frames all connections may hold together; a connection whose next frame
#: does not fit waits (reading paused) until others complete theirs.
DEFAULT_MAX_BUFFERED_BYTES = 256 << 20
DEFAULT_MAX_OPEN_FILES = 1024
#: Seconds between checks of the users file and the certificate files for a change (reload.py).
#: A Kubernetes Secret volume is itself updated a minute or so after the Secret, so a few
#: seconds more cost nothing, and reading three small files that often costs nothing either.
DEFAULT_RELOAD_INTERVAL = 5.0
DEFAULT_SEGMENT_BYTES = 500_000_000
MAX_SEGMENT_BYTES = 3_000_000_000
FSYNC_POLICIES = ("never", "interval", "chunk")
#: RabbitMQ's Prometheus port (rabbitmq_prometheus), the metrics listener's default
DEFAULT_METRICS_PORT = 15692
#: label cardinality caps of /metrics: streams and named consumers given series of their own
DEFAULT_METRICS_MAX_STREAMS = 1000
DEFAULT_METRICS_MAX_CONSUMERS = 1000
#: RabbitMQ's Prometheus port over TLS (prometheus.ssl.port in its docs' examples)
DEFAULT_METRICS_TLS_PORT = 15691
#: RabbitMQ's management port (rabbitmq_management), the management API's default
DEFAULT_HTTP_PORT = 15672
#: RabbitMQ's management port over TLS (management.ssl.port in its docs' examples)
DEFAULT_HTTPS_PORT = 15671
#: Seconds an unauthenticated protocol's connection may stay silent with nothing outstanding
#: (no subscription, long poll or unconfirmed append) before the broker closes it
#: ([listeners.<protocol>] idle_timeout). None of them has a heartbeat the broker could
#: demand (SBP's HEARTBEAT is the client's choice), so a client quiet this long reconnects.
DEFAULT_IDLE_TIMEOUT = 300
#: Each unauthenticated protocol may hold at most this share of limits.max_connections by
#: default ([listeners.<protocol>] max_connections): the three together leave 70% of the
#: broker's connections to the authenticated RabbitMQ listener, whatever they are sent.
LISTENER_SHARE = 10


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says which and why."""


class ProtocolSettings(Protocol):
    """A further protocol's own keys of its [listeners.<protocol>] section (besides enabled,
    host, port, tls, max_connections and idle_timeout, which every listener has): a frozen
    dataclass whose fields are the keys, built with its defaults when the section is absent."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> ProtocolSettings:
        """The settings ``table`` (the section, ``where`` its name in messages) gives."""
        ...

    def check(self, cfg: BrokerConfig) -> None:
        """Raise ConfigError when these settings do not fit ``cfg`` (its frame_limit): checked
        only when the protocol listens."""
        ...


S = TypeVar("S", bound=ProtocolSettings)


class SpokenProtocol(Protocol):
    """What reading a config file needs of a protocol the broker speaks (a row of
    broker/protocols.py): its name, its settings class (None: RabbitMQ's, [server]'s), and
    whether it authenticates its clients."""

    @property
    def name(self) -> str: ...

    @property
    def settings(self) -> type[ProtocolSettings] | None: ...

    @property
    def authenticated(self) -> bool: ...


@dataclass(frozen=True)
class User:
    name: str
    password: str
    loopback_only: bool = False
    max_connections: int = 0


@dataclass(frozen=True)
class Permission:
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


@dataclass(frozen=True)
class TlsConfig:
    certfile: Path
    keyfile: Path
    port: int = DEFAULT_TLS_PORT
    cafile: Path | None = None
    verify_peer: bool = False
    advertised_port: int | None = None


@dataclass(frozen=True)
class Listener:
    """One listening socket: a protocol on a host and port, plain or TLS ([tls]'s certificate).
    Connection limits, users and permissions are the broker's, whatever the protocol."""

    protocol: str
    host: str
    port: int
    tls: bool = False


@dataclass(frozen=True)
class ListenerLimits:
    """What a listener's connections are held to, besides the broker's limits: at most
    ``max_connections`` of them at once (0: only limits.max_connections), closed when no
    complete first frame came within ``first_frame_timeout`` seconds or when silent for
    ``idle_timeout`` seconds with nothing outstanding (0: never). The default, NO_LIMITS, is a
    connection no listener made (tests build them so)."""

    protocol: str = ""
    max_connections: int = 0
    first_frame_timeout: int = 0
    idle_timeout: int = 0


NO_LIMITS = ListenerLimits()


@dataclass(frozen=True)
class MetricsListener:
    """The Prometheus endpoint (``/metrics`` over HTTP; over HTTPS with [tls]'s certificate on
    ``tls_port`` too, None: none). ``host`` None: [server] host. ``required`` False (nothing
    configured, the default port): if the port is taken the broker logs it and serves without
    metrics, so two brokers on one machine both start; a configured one that cannot listen
    stops the broker."""

    port: int = DEFAULT_METRICS_PORT
    host: str | None = None
    required: bool = False
    max_streams: int = DEFAULT_METRICS_MAX_STREAMS
    max_consumers: int = DEFAULT_METRICS_MAX_CONSUMERS
    tls_port: int | None = None


@dataclass(frozen=True)
class HttpListener:
    """The management HTTP API: plain HTTP on ``port`` (None: none), HTTPS with [tls]'s
    certificate on ``tls_port`` (None: none). ``host`` None: [server] host. ``required`` as
    MetricsListener's: False (nothing configured) lets the broker serve without it when the
    port is taken."""

    port: int | None = DEFAULT_HTTP_PORT
    host: str | None = None
    required: bool = False
    tls_port: int | None = None


@dataclass(frozen=True)
class Retention:
    max_age_ms: int | None = None
    max_length_bytes: int | None = None
    max_segment_size_bytes: int = DEFAULT_SEGMENT_BYTES


@dataclass(frozen=True)
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    data_dir: Path = Path("data")
    advertised_host: str | None = None
    advertised_port: int | None = None
    frame_max: int = DEFAULT_FRAME_MAX
    frame_limit: int = DEFAULT_FRAME_LIMIT
    heartbeat: int = DEFAULT_HEARTBEAT
    handshake_timeout: int = 10
    request_timeout: int = DEFAULT_REQUEST_TIMEOUT
    frame_timeout: int = DEFAULT_FRAME_TIMEOUT
    cluster_name: str = "streamlet"
    fsync: str = "never"
    max_open_files: int = DEFAULT_MAX_OPEN_FILES
    retention: Retention = field(default_factory=Retention)
    users: tuple[User, ...] = (User("guest", "guest", loopback_only=True),)
    vhosts: tuple[str, ...] = ("/",)
    permissions: tuple[Permission, ...] = ()
    tls: TlsConfig | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_user: int = 0
    max_streams: int = DEFAULT_MAX_STREAMS
    max_partitions: int = DEFAULT_MAX_PARTITIONS
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    users_file: Path | None = None
    #: the main config file's own [[users]] (users_file's are added to them): a reload of the
    #: users file starts again from these
    config_users: tuple[User, ...] = ()
    #: the main config file's own [[permissions]] (``permissions`` adds users_file's to them)
    config_permissions: tuple[Permission, ...] = ()
    #: seconds between checks of users_file and [tls]'s files for a change; 0: on SIGHUP only
    reload_interval: float = DEFAULT_RELOAD_INTERVAL
    directory_file: Path | None = None
    #: this broker's id in replicated streams' member sets (the pod ordinal); None: not set
    member: int | None = None
    #: the configured user whose credentials followers log in to leaders with (None: the first)
    replication_user: str | None = None
    #: the configured user the placement driver logs in as (None: the replication user)
    driver_user: str | None = None
    #: every member's advertised address, by member id (a Create with initial-cluster-size > 1
    #: places the stream's members among them); empty: no replicated creates
    peers: tuple[tuple[str, int], ...] = ()
    #: a restarted member takes up the role it had, in the same epoch, instead of waiting
    #: fenced for a placement driver's Assign (for clusters without one)
    resume_roles: bool = False
    #: [cluster] tls: True/False as configured; None: the default (see replication_tls)
    cluster_tls: bool | None = None
    rabbitmq_listener: bool = True  # [listeners.rabbitmq] enabled
    other_listeners: tuple[Listener, ...] = ()  # [listeners.<protocol>] of further protocols
    #: each further protocol's own keys of [listeners.<protocol>], by protocol (its adapter's
    #: settings class, defaults included when the file has no section; see settings_of)
    settings: Mapping[str, ProtocolSettings] = field(default_factory=dict)
    #: the protocols without authentication: served on loopback only, or on TLS with client
    #: certificates, each within a share of the connections (listener_limits)
    unauthenticated: frozenset[str] = frozenset()
    #: [listeners.metrics], serve --metrics-port; None: no metrics endpoint
    metrics: MetricsListener | None = field(default_factory=MetricsListener)
    #: [listeners.<protocol>] max_connections and idle_timeout as configured, by protocol
    #: (listener_limits gives the defaults of those not there)
    listener_budgets: tuple[tuple[str, int], ...] = ()
    idle_timeouts: tuple[tuple[str, int], ...] = ()
    #: [listeners.http], serve --http-port; None: no management API
    http: HttpListener | None = field(default_factory=HttpListener)

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """Every socket the broker listens on: RabbitMQ Stream on [server] host and port (and
        on [tls] port), then the further protocols' [listeners.<protocol>]."""
        own = [Listener("rabbitmq", self.host, self.port)] if self.rabbitmq_listener else []
        if self.tls is not None:
            own.append(Listener("rabbitmq", self.host, self.tls.port, tls=True))
        return (*own, *self.other_listeners)

    def listener_limits(self, protocol: str) -> ListenerLimits:
        """The budget and deadlines of ``protocol``'s listeners (plain and TLS together). An
        unauthenticated protocol's: a tenth of limits.max_connections (at least 1; none when
        that is 0), a complete first frame within server.handshake_timeout (RSIO's is its
        hello), idle_timeout DEFAULT_IDLE_TIMEOUT. RabbitMQ's: no budget of its own unless
        configured, and neither deadline here: its handshake must reach Open within
        server.handshake_timeout and heartbeats say when it is silent (rabbitmq/handshake.py)."""
        budget = dict(self.listener_budgets).get(protocol)
        if protocol not in self.unauthenticated:
            return ListenerLimits(protocol, budget or 0)
        if budget is None:
            budget = max(self.max_connections // LISTENER_SHARE, 1) if self.max_connections else 0
        idle = dict(self.idle_timeouts).get(protocol, DEFAULT_IDLE_TIMEOUT)
        return ListenerLimits(protocol, budget, self.handshake_timeout, idle)

    def settings_of(self, protocol: str, kind: type[S]) -> S:
        """``protocol``'s settings (``kind``'s defaults when none were read): an adapter takes
        them once per connection."""
        found = self.settings.get(protocol)
        if found is None:
            return kind()
        if not isinstance(found, kind):
            raise TypeError(f"the settings of {protocol} are a {type(found).__name__}, not a {kind.__name__}")
        return found

    @property
    def frame_budget(self) -> int:
        """limits.max_buffered_bytes, raised to frame_limit: one whole frame always fits."""
        return max(self.max_buffered_bytes, self.frame_limit) if self.max_buffered_bytes else 0

    @property
    def replication_credentials(self) -> tuple[str, str]:
        """(user, password) a follower's link logs in to its leader with."""
        name = self.replication_user or self.users[0].name
        user = next(u for u in self.users if u.name == name)  # validate() checked it is there
        return user.name, user.password

    @property
    def replication_tls(self) -> bool:
        """Whether this broker's links to other brokers (followers to leaders, forwarded
        requests, relays, creates) use TLS: [cluster] tls, by default on whenever the broker
        has [tls], plain listener or not. Then cluster.peers and the leaders' addresses are
        the brokers' TLS ports; the link checks the peer's certificate against [tls] cafile
        (without one: the system's CAs and this broker's own certificate) and its name
        against the peer's host, and presents this broker's certificate."""
        if self.cluster_tls is not None:
            return self.cluster_tls
        return self.tls is not None

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.advertised_host or ("localhost" if self.host in ("0.0.0.0", "::", "") else self.host)
        return host, self.advertised_port or self.port

