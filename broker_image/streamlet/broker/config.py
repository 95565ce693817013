"""Broker configuration: defaults, a TOML file, environment, then command-line flags.

File format (all keys optional)::

    [server]
    host = "127.0.0.1"
    port = 5552
    data_dir = "data"
    advertised_host = "localhost"     # or env STREAMLET_ADVERTISED_HOST
    advertised_port = 5552            # or env STREAMLET_ADVERTISED_PORT
    frame_max = 1048576               # offered in Tune: clients size their frames to it
    frame_limit = 16777216            # hard limit on a frame received after Open (see below)
    heartbeat = 60
    handshake_timeout = 10            # seconds from connect to Open before the broker closes
    request_timeout = 60              # seconds a client has to answer a ConsumerUpdate
    frame_timeout = 60                # seconds a frame may take from its first byte to its last
    cluster_name = "streamlet"
    users_file = "users.toml"         # more [[users]] and [[permissions]], in a file of their own
    reload_interval = 5               # seconds between checks of users_file and [tls]'s files
                                      # (reloaded when changed, and at once on SIGHUP; 0: SIGHUP only)

    [cluster]
    directory_file = "streams.json"   # where streams held by other brokers live (directory.py)
    member = 0                        # this broker's member id in replicated streams (pod ordinal),
                                      # or "auto": the number after the hostname's last '-'
                                      # (a StatefulSet pod's <name>-<ordinal>); env STREAMLET_MEMBER
    replication_user = "guest"        # the user followers log in to their leaders as (default: the first user)
    driver_user = "operator"          # the placement driver's user (default: replication_user); the
                                      # replication commands are taken from these two users only
    peers = ["b-0:5552", "b-1:5552"]  # every member's address, by member id: where replicas go
    resume_roles = false              # a restarted member takes up its last role (no placement driver)
    tls = false                       # the links to other brokers over TLS (see replication_tls);
                                      # default: true when there is [tls] and no plain listener

    [storage]
    fsync = "never"                   # never | interval | chunk
    max_open_files = 1024             # segment and index files kept open for reading (LRU)

    [retention]                       # defaults for streams created without these arguments
    max_age = "7D"
    max_length_bytes = 0              # 0 = unlimited
    max_segment_size_bytes = 500000000

    [[users]]
    name = "guest"
    password = "guest"
    loopback_only = true              # default: true for guest, false otherwise
    max_connections = 0               # this user's own limit (0: the [limits] default)

    [[vhosts]]                        # default: only "/"
    name = "/"

    [[permissions]]                   # a user with no entry here (nor in users_file) may use
    user = "app"                      # every vhost fully; users_file may hold more entries
    vhost = "/"
    configure = "^app-"               # regular expressions on stream names, as RabbitMQ's
    write = "^app-"                   # ("" denies everything)
    read = ".*"

    [tls]                             # no TLS listener unless this section is there
    port = 5551
    certfile = "server.pem"
    keyfile = "server.key"
    cafile = "ca.pem"                 # CA for client certificates
    verify_peer = false               # true: require a client certificate (SASL EXTERNAL)
    advertised_port = 5551            # told to TLS clients in Open and Metadata (default: port)

    [listeners.rabbitmq]              # the RabbitMQ Stream listener: [server] host and port
    enabled = true                    # false: no plain listener (TLS only, with [tls])
    max_connections = 0               # its plain and TLS connections together (0: only [limits]'s)

    [listeners.<protocol>]            # a further protocol (broker/main.py LISTENERS names them)
    host = "127.0.0.1"                # default: [server] host
    port = 5560                       # required
    tls = false                       # true: with [tls]'s certificate
    max_connections = 1000            # mega, rsio, sbp: default a tenth of limits.max_connections
    idle_timeout = 300                # mega, rsio, sbp: seconds silent with nothing outstanding
                                      # before a close (0: never); a complete first frame must
                                      # come within server.handshake_timeout

    [listeners.mega]                  # MEGA (docs/protocols/mega.md); off unless configured
    port = 5553                       # or serve --mega-port (0: off)
    host = "127.0.0.1"                # MEGA has no authentication: loopback only (an address,
                                      # or a name resolving to loopback addresses only), unless
                                      # tls = true with [tls] verify_peer = true
    max_topic_bytes = 255             # a longer topic: MESSAGE_TOO_LARGE and a close
    max_payload_bytes = 1048576       # a longer PRODUCE payload: the same (<= frame_limit)

    [listeners.rsio]                  # Reactive Streams IO (docs/protocols/reactive-streams.md)
    port = 5554                       # or serve --rsio-port (0: off); off unless configured
    host = "127.0.0.1"                # no authentication either: as MEGA's
    max_element_bytes = 1048576       # the largest element taken (<= frame_limit)
    split_bytes = 65536               # elements longer than this are sent in parts
    window = 256                      # an append's demand: elements in flight before confirms

    [listeners.metrics]               # Prometheus text at http://host:port/metrics (docs/operations.md)
    port = 15692                      # or serve --metrics-port (0: off); RabbitMQ's Prometheus port
    host = "0.0.0.0"                  # default: [server] host
    enabled = true                    # on by default; see MetricsListener
    max_streams = 1000                # streams given per-stream series (the rest: counted only)
    max_consumers = 1000              # named consumers given offset and lag series
    [listeners.http]                  # the management HTTP API (docs/operations.md), as RabbitMQ's
    port = 15672                      # or serve --http-port (0: off); RabbitMQ's management port
    host = "0.0.0.0"                  # default: [server] host
    enabled = true                    # on by default; see HttpListener
    [listeners.sbp]                   # the Streaming Batch Protocol (docs/protocols/sbp.md)
    port = 5555                       # or serve --sbp-port (0: off); off unless configured
    host = "127.0.0.1"                # no authentication either: as MEGA's
    max_frame_bytes = 16777216        # a longer frame: GOAWAY and a close (<= frame_limit)

    [limits]
    max_connections = 10000           # per broker, 0 = unlimited
    max_connections_per_user = 0      # per user, 0 = unlimited
    max_streams = 10000               # streams per broker, super stream partitions included
    max_partitions = 1000             # partitions per super stream
    max_buffered_bytes = 268435456    # incomplete frames held by all connections together
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

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
#: MEGA's limits on a request (streamlet.mega's defaults; a stream name has at most 255 bytes)
DEFAULT_MEGA_MAX_TOPIC = 255
DEFAULT_MEGA_MAX_PAYLOAD = 1 << 20
#: Reactive Streams IO's limits (docs/protocols/reactive-streams.md)
DEFAULT_RSIO_MAX_ELEMENT = 1 << 20
DEFAULT_RSIO_SPLIT = 64 << 10
DEFAULT_RSIO_WINDOW = 256
#: RabbitMQ's Prometheus port (rabbitmq_prometheus), the metrics listener's default
DEFAULT_METRICS_PORT = 15692
#: label cardinality caps of /metrics: streams and named consumers given series of their own
DEFAULT_METRICS_MAX_STREAMS = 1000
DEFAULT_METRICS_MAX_CONSUMERS = 1000
#: RabbitMQ's management port (rabbitmq_management), the management API's default
DEFAULT_HTTP_PORT = 15672
#: SBP's largest frame (docs/protocols/sbp.md)
DEFAULT_SBP_MAX_FRAME = 16 << 20
#: protocols without authentication: served on loopback, or on TLS with client certificates
UNAUTHENTICATED = ("mega", "rsio", "sbp")
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
    """The Prometheus endpoint (``/metrics`` over HTTP). ``host`` None: [server] host.
    ``required`` False (nothing configured, the default port): if the port is taken the broker
    logs it and serves without metrics, so two brokers on one machine both start; a configured
    one that cannot listen stops the broker."""

    port: int = DEFAULT_METRICS_PORT
    host: str | None = None
    required: bool = False
    max_streams: int = DEFAULT_METRICS_MAX_STREAMS
    max_consumers: int = DEFAULT_METRICS_MAX_CONSUMERS


@dataclass(frozen=True)
class HttpListener:
    """The management HTTP API. ``host`` None: [server] host. ``required`` as MetricsListener's:
    False (nothing configured) lets the broker serve without it when the port is taken."""

    port: int = DEFAULT_HTTP_PORT
    host: str | None = None
    required: bool = False


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
    mega_max_topic_bytes: int = DEFAULT_MEGA_MAX_TOPIC  # [listeners.mega] max_topic_bytes
    mega_max_payload_bytes: int = DEFAULT_MEGA_MAX_PAYLOAD  # [listeners.mega] max_payload_bytes
    rsio_max_element_bytes: int = DEFAULT_RSIO_MAX_ELEMENT  # [listeners.rsio] max_element_bytes
    rsio_split_bytes: int = DEFAULT_RSIO_SPLIT  # [listeners.rsio] split_bytes
    rsio_window: int = DEFAULT_RSIO_WINDOW  # [listeners.rsio] window
    #: [listeners.metrics], serve --metrics-port; None: no metrics endpoint
    metrics: MetricsListener | None = field(default_factory=MetricsListener)
    sbp_max_frame_bytes: int = DEFAULT_SBP_MAX_FRAME  # [listeners.sbp] max_frame_bytes
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
        if protocol not in UNAUTHENTICATED:
            return ListenerLimits(protocol, budget or 0)
        if budget is None:
            budget = max(self.max_connections // LISTENER_SHARE, 1) if self.max_connections else 0
        idle = dict(self.idle_timeouts).get(protocol, DEFAULT_IDLE_TIMEOUT)
        return ListenerLimits(protocol, budget, self.handshake_timeout, idle)

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
        requests, relays, creates) use TLS: [cluster] tls, by default on when the broker has
        [tls] and no plain listener (a TLS-only cluster has no plaintext port to reach). Then
        cluster.peers and the leaders' addresses are the brokers' TLS ports; the link checks
        the peer's certificate against [tls] cafile (the system's CAs without one) and its
        name against the peer's host, and presents this broker's certificate."""
        if self.cluster_tls is not None:
            return self.cluster_tls
        return self.tls is not None and not self.rabbitmq_listener

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.advertised_host or ("localhost" if self.host in ("0.0.0.0", "::", "") else self.host)
        return host, self.advertised_port or self.port


_DURATION = re.compile(r"^(\d+)([YMDhms])$")
_UNIT_MS = {"Y": 365 * 86400_000, "M": 30 * 86400_000, "D": 86400_000, "h": 3600_000,
            "m": 60_000, "s": 1000}


def parse_duration_ms(text: str) -> int:
    """RabbitMQ's max-age syntax: a number and one unit of Y M D h m s, e.g. ``7D``."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ConfigError(f"bad duration {text!r}: expected a number and one of Y M D h m s, e.g. 7D")
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


def _peers(value: Any) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"cluster.peers must be a list of 'host:port' strings, got {value!r}")
    out = []
    for v in value:
        host, _, port = v.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"cluster.peers: expected 'host:port', got {v!r}")
        out.append((host.strip("[]"), int(port)))
    return tuple(out)


MAX_MEMBER = 0xFFFE
#: The member id "auto" stands for: the digits after the last '-' of the hostname's first label.
AUTO_MEMBER = "auto"
_ORDINAL = re.compile(r"-(\d+)$")


def member_from_hostname(hostname: str) -> int:
    """A StatefulSet pod's ordinal from its hostname, ``<name>-<ordinal>`` (only the first DNS
    label counts, so a pod with ``setHostnameAsFQDN`` works too)."""
    label = hostname.split(".", 1)[0]
    m = _ORDINAL.search(label)
    if not m:
        raise ConfigError(f'cluster.member = "{AUTO_MEMBER}": hostname {hostname!r} does not end '
                          f"in -<ordinal> as a StatefulSet pod's <name>-<ordinal> does; set "
                          "cluster.member to this broker's member id")
    return _member(int(m.group(1)), f"cluster.member (from hostname {hostname!r})")


def _member(value: Any, where: str = "cluster.member") -> int:
    """An explicit member id, or "auto" (from the hostname)."""
    if value == AUTO_MEMBER:
        return member_from_hostname(socket.gethostname())
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_MEMBER:
        raise ConfigError(f'{where} must be an integer in 0..{MAX_MEMBER} or "{AUTO_MEMBER}", '
                          f"got {value!r}")
    return value


def _int(section: dict[str, Any], key: str, where: str, minimum: int = 0) -> int | None:
    if key not in section:
        return None
    v = section[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise ConfigError(f"{where}.{key} must be an integer >= {minimum}, got {v!r}")
    return v


def load(path: Path | None = None, mega_port: int | None = None, rsio_port: int | None = None,
         sbp_port: int | None = None, metrics_port: int | None = None,
         http_port: int | None = None, **overrides: Any) -> BrokerConfig:
    """Build the config: defaults < file < environment < non-None keyword overrides (flags);
    ``mega_port``, ``rsio_port``, ``sbp_port``: serve --mega-port, --rsio-port, --sbp-port
    (with_port); ``metrics_port``: --metrics-port (with_metrics_port); ``http_port``:
    --http-port (with_http_port)."""
    cfg = BrokerConfig()
    if path is not None:
        try:
            doc = tomllib.loads(Path(path).read_text())
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror}") from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from e
        cfg = _apply_file(cfg, absolute_paths(doc, Path(path).parent))
    env: dict[str, Any] = {}
    if os.environ.get("STREAMLET_ADVERTISED_HOST"):
        env["advertised_host"] = os.environ["STREAMLET_ADVERTISED_HOST"]
    if os.environ.get("STREAMLET_ADVERTISED_PORT"):
        text = os.environ["STREAMLET_ADVERTISED_PORT"].strip()
        if not text.isdigit() or not 0 < int(text) < 65536:
            raise ConfigError(f"STREAMLET_ADVERTISED_PORT must be a port (1..65535), got {text!r}")
        env["advertised_port"] = int(text)
    if os.environ.get("STREAMLET_MEMBER"):
        env["member"] = _member(os.environ["STREAMLET_MEMBER"], "STREAMLET_MEMBER")
    cfg = replace(cfg, **env)
    flags = {k: v for k, v in overrides.items() if v is not None}
    if "data_dir" in flags:
        flags["data_dir"] = Path(flags["data_dir"])
    cfg = with_port(with_port(replace(cfg, **flags), "mega", mega_port), "rsio", rsio_port)
    cfg = with_metrics_port(with_port(cfg, "sbp", sbp_port), metrics_port)
    cfg = with_http_port(cfg, http_port)
    _validate(cfg)
    return cfg


#: the file paths a config file names, by section: a relative one is relative to the file's
#: folder (not to the directory the broker was started from)
PATH_KEYS = {"server": ("data_dir", "users_file"), "cluster": ("directory_file",),
             "tls": ("certfile", "keyfile", "cafile")}


def absolute_paths(doc: dict[str, Any], base: Path) -> dict[str, Any]:
    """``doc`` with its relative PATH_KEYS made absolute against ``base`` (the file's folder)."""
    out = dict(doc)
    for section, keys in PATH_KEYS.items():
        table = out.get(section)
        if not isinstance(table, dict):
            continue
        table = out[section] = dict(table)
        for key in keys:
            value = table.get(key)
            if isinstance(value, str) and value and not Path(value).is_absolute():
                table[key] = str(base.resolve() / value)
    return out


#: the keys of the sections read here (a misspelt key is refused, not ignored)
_SECTION_KEYS = {
    "server": {"host", "port", "data_dir", "advertised_host", "advertised_port", "frame_max",
               "frame_limit", "heartbeat", "handshake_timeout", "request_timeout",
               "frame_timeout", "cluster_name", "users_file", "reload_interval"},
    "storage": {"fsync", "max_open_files"},
    "retention": {"max_age", "max_length_bytes", "max_segment_size_bytes"},
    "cluster": {"directory_file", "member", "replication_user", "driver_user", "peers",
                "resume_roles", "tls"},
    "tls": {"port", "certfile", "keyfile", "cafile", "verify_peer", "advertised_port"},
    "limits": {"max_connections", "max_connections_per_user", "max_streams", "max_partitions",
               "max_buffered_bytes"},
}


def _apply_file(cfg: BrokerConfig, doc: dict[str, Any]) -> BrokerConfig:
    known = {"server", "storage", "retention", "users", "vhosts", "permissions", "tls", "limits",
             "cluster", "listeners"}
    unknown = set(doc) - known
    if unknown:
        raise ConfigError(f"unknown config section(s): {', '.join(sorted(unknown))}")
    for section, keys in _SECTION_KEYS.items():
        extra = set(doc.get(section, {})) - keys
        if extra:
            raise ConfigError(f"unknown key(s) in [{section}]: {', '.join(sorted(extra))}")
    server = doc.get("server", {})
    changes: dict[str, Any] = {}
    for key in ("host", "advertised_host", "cluster_name"):
        if key in server:
            changes[key] = str(server[key])
    if "data_dir" in server:
        changes["data_dir"] = Path(server["data_dir"])
    for key in ("port", "advertised_port", "frame_max", "frame_limit", "heartbeat",
                "handshake_timeout", "request_timeout", "frame_timeout"):
        v = _int(server, key, "server")
        if v is not None:
            changes[key] = v
    storage = doc.get("storage", {})
    if "fsync" in storage:
        changes["fsync"] = str(storage["fsync"])
    v = _int(storage, "max_open_files", "storage", 16)
    if v is not None:
        changes["max_open_files"] = v
    ret = doc.get("retention", {})
    if ret:
        max_age = parse_duration_ms(str(ret["max_age"])) if ret.get("max_age") else None
        max_len = _int(ret, "max_length_bytes", "retention") or None
        seg = _int(ret, "max_segment_size_bytes", "retention", 1) or DEFAULT_SEGMENT_BYTES
        changes["retention"] = Retention(max_age, max_len, seg)
    if "reload_interval" in server:
        changes["reload_interval"] = _reload_interval(server["reload_interval"])
    access = _apply_access(doc)
    users = _users(doc.get("users", []), "[[users]]") if "users" in doc else None
    changes["config_permissions"] = access.get("permissions", ())
    if server.get("users_file"):
        changes["users_file"] = path = Path(str(server["users_file"]))
        changes["config_users"] = users or ()
        users, access["permissions"] = combine_users(
            changes["config_users"], changes["config_permissions"],
            access.get("vhosts", cfg.vhosts), path)
    if users is not None:
        changes["users"] = users
    cluster = doc.get("cluster", {})
    if cluster.get("directory_file"):
        changes["directory_file"] = Path(str(cluster["directory_file"]))
    if "member" in cluster:
        changes["member"] = _member(cluster["member"])
    if "replication_user" in cluster:
        changes["replication_user"] = str(cluster["replication_user"])
    if "driver_user" in cluster:
        changes["driver_user"] = str(cluster["driver_user"])
    if "peers" in cluster:
        changes["peers"] = _peers(cluster["peers"])
    if "tls" in cluster:
        if not isinstance(cluster["tls"], bool):
            raise ConfigError(f"cluster.tls must be true or false, got {cluster['tls']!r}")
        changes["cluster_tls"] = cluster["tls"]
    if "resume_roles" in cluster:
        if not isinstance(cluster["resume_roles"], bool):
            raise ConfigError(f"cluster.resume_roles must be true or false, got {cluster['resume_roles']!r}")
        changes["resume_roles"] = cluster["resume_roles"]
    changes.update(access)
    changes.update(_listeners(doc.get("listeners", {}), str(changes.get("host", cfg.host))))
    return replace(cfg, **changes)


#: the further protocols' listeners and their own keys (besides enabled, host, port, tls)
_BUDGET_KEYS = {"max_connections", "idle_timeout"}
_LISTENER_KEYS = {"mega": {"max_topic_bytes", "max_payload_bytes", *_BUDGET_KEYS},
                  "rsio": {"max_element_bytes", "split_bytes", "window", *_BUDGET_KEYS},
                  "sbp": {"max_frame_bytes", *_BUDGET_KEYS}}


def _listeners(section: Any, default_host: str) -> dict[str, Any]:
    """[listeners.rabbitmq] enabled; [listeners.<protocol>] host, port, tls, enabled."""
    if not isinstance(section, dict) or not all(isinstance(v, dict) for v in section.values()):
        raise ConfigError("[listeners] must hold one table per protocol, e.g. [listeners.rabbitmq]")
    changes: dict[str, Any] = {}
    rabbitmq = section.get("rabbitmq", {})
    extra = set(rabbitmq) - {"enabled", "max_connections"}
    if extra:
        raise ConfigError(f"[listeners.rabbitmq] takes only enabled and max_connections ([server] "
                          f"host and port and [tls] port place it), not {', '.join(sorted(extra))}")
    changes["rabbitmq_listener"] = bool(rabbitmq.get("enabled", True))
    budgets, idles = [], []
    for protocol in ("rabbitmq", *UNAUTHENTICATED):
        table = section.get(protocol, {})
        budget = _int(table, "max_connections", f"listeners.{protocol}")
        if budget is not None:
            budgets.append((protocol, budget))
        idle = _int(table, "idle_timeout", f"listeners.{protocol}")
        if idle is not None:
            idles.append((protocol, idle))
    changes["listener_budgets"], changes["idle_timeouts"] = tuple(budgets), tuple(idles)
    if "metrics" in section:
        changes["metrics"] = _metrics_listener(section["metrics"])
    if "http" in section:
        changes["http"] = _http_listener(section["http"])
    others = []
    mega = section.get("mega", {})
    for key, field_name in (("max_topic_bytes", "mega_max_topic_bytes"),
                            ("max_payload_bytes", "mega_max_payload_bytes")):
        value = _int(mega, key, "listeners.mega", 1)
        if value is not None:
            changes[field_name] = value
    rsio = section.get("rsio", {})
    for key, field_name in (("max_element_bytes", "rsio_max_element_bytes"),
                            ("split_bytes", "rsio_split_bytes"), ("window", "rsio_window")):
        value = _int(rsio, key, "listeners.rsio", 1)
        if value is not None:
            changes[field_name] = value
    value = _int(section.get("sbp", {}), "max_frame_bytes", "listeners.sbp", 16)
    if value is not None:
        changes["sbp_max_frame_bytes"] = value
    for protocol, table in section.items():
        if protocol in ("rabbitmq", "metrics", "http"):
            continue
        where = f"listeners.{protocol}"
        # (a protocol the broker does not speak is refused where the listeners are made)
        extra = set(table) - {"enabled", "host", "port", "tls"} - _LISTENER_KEYS.get(protocol, set())
        if protocol in _LISTENER_KEYS and extra:
            raise ConfigError(f"unknown key(s) in [{where}]: {', '.join(sorted(extra))}")
        if not table.get("enabled", True):
            continue
        port = _int(table, "port", where, 1)
        if port is None:
            raise ConfigError(f"[{where}] needs a port")
        others.append(Listener(protocol, str(table.get("host", default_host)), port,
                               bool(table.get("tls", False))))
    changes["other_listeners"] = tuple(others)
    return changes


def _metrics_listener(table: dict[str, Any]) -> MetricsListener | None:
    """[listeners.metrics]: enabled, host, port, max_streams, max_consumers. Configured, it
    is required: a port it cannot listen on stops the broker."""
    extra = set(table) - {"enabled", "host", "port", "max_streams", "max_consumers"}
    if extra:
        raise ConfigError(f"unknown key(s) in [listeners.metrics]: {', '.join(sorted(extra))}")
    if not table.get("enabled", True):
        return None
    where = "listeners.metrics"
    port = _int(table, "port", where)
    if port == 0:
        return None
    streams = _int(table, "max_streams", where)
    consumers = _int(table, "max_consumers", where)
    return MetricsListener(
        port or DEFAULT_METRICS_PORT, str(table["host"]) if "host" in table else None, True,
        DEFAULT_METRICS_MAX_STREAMS if streams is None else streams,
        DEFAULT_METRICS_MAX_CONSUMERS if consumers is None else consumers)


def _http_listener(table: dict[str, Any]) -> HttpListener | None:
    """[listeners.http]: enabled, host, port. Configured, it is required, as metrics'."""
    extra = set(table) - {"enabled", "host", "port"}
    if extra:
        raise ConfigError(f"unknown key(s) in [listeners.http]: {', '.join(sorted(extra))}")
    port = _int(table, "port", "listeners.http")
    if not table.get("enabled", True) or port == 0:
        return None
    return HttpListener(port or DEFAULT_HTTP_PORT,
                        str(table["host"]) if "host" in table else None, True)


def _users(entries: Any, where: str) -> tuple[User, ...]:
    if not isinstance(entries, list) or not all(isinstance(u, dict) for u in entries):
        raise ConfigError(f"{where} must be a list of tables")
    users = []
    for u in entries:
        if not u.get("name") or "password" not in u:
            raise ConfigError(f"every {where} entry needs a name and a password")
        users.append(User(str(u["name"]), str(u["password"]),
                          bool(u.get("loopback_only", u["name"] == "guest")),
                          _int(u, "max_connections", "users") or 0))
    return tuple(users)


@dataclass(frozen=True)
class UsersFile:
    """What ``server.users_file`` holds: users and, optionally, their permissions."""

    users: tuple[User, ...] = ()
    permissions: tuple[Permission, ...] = ()


def _read_users_file(path: Path) -> UsersFile:
    """``server.users_file``: a TOML file of ``[[users]]`` and ``[[permissions]]`` tables only
    (e.g. from a Secret). Its permissions are reloaded with its users, so a user it adds is
    never known without them."""
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read users file {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"users file {path} is not valid TOML: {e}") from e
    extra = set(doc) - {"users", "permissions"}
    if extra:
        raise ConfigError(f"users file {path} may hold only [[users]] and [[permissions]], "
                          f"not {', '.join(sorted(extra))}")
    return UsersFile(_users(doc.get("users", []), f"[[users]] in {path}"),
                     _permissions(doc.get("permissions", []), f"[[permissions]] in {path}"))


def combine_users(config_users: tuple[User, ...], config_permissions: tuple[Permission, ...],
                  vhosts: tuple[str, ...], users_file: Path
                  ) -> tuple[tuple[User, ...], tuple[Permission, ...]]:
    """The broker's users and permissions: the main config's, then the users file's (read
    now). The file's permissions must name a user of either and one of ``vhosts`` (vhosts are
    the main config's only), and no (user, vhost) may have two entries: one of them would be
    silently ignored."""
    read = _read_users_file(users_file)
    users = _check_unique((*config_users, *read.users))
    names = {u.name for u in users}
    seen = {(p.user, p.vhost) for p in config_permissions}
    for p in read.permissions:
        if p.user not in names:
            raise ConfigError(f"permissions for {p.user!r} in {users_file}: no such user in [[users]]")
        if p.vhost not in vhosts:
            raise ConfigError(f"permissions for {p.user} in {users_file}: unknown vhost {p.vhost!r}")
        if (p.user, p.vhost) in seen:
            raise ConfigError(f"permissions for {p.user} on vhost {p.vhost!r} are given twice "
                              f"(users file {users_file})")
        seen.add((p.user, p.vhost))
    return users, (*config_permissions, *read.permissions)


def _reload_interval(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 86400:
        raise ConfigError("server.reload_interval must be a number of seconds in 0..86400 "
                          f"(0: reload on SIGHUP only), got {value!r}")
    return float(value)


def _check_unique(users: tuple[User, ...]) -> tuple[User, ...]:
    seen: set[str] = set()
    for u in users:
        if u.name in seen:
            raise ConfigError(f"user {u.name!r} is defined twice")
        seen.add(u.name)
    return users


def _permissions(entries: Any, where: str) -> tuple[Permission, ...]:
    if not isinstance(entries, list) or not all(isinstance(p, dict) for p in entries):
        raise ConfigError(f"{where} must be a list of tables")
    perms = []
    for p in entries:
        if not p.get("user") or not p.get("vhost"):
            raise ConfigError(f"every {where} entry needs a user and a vhost")
        kinds = {k: str(p.get(k, ".*")) for k in ("configure", "write", "read")}
        for k, rx in kinds.items():
            try:
                re.compile(rx)
            except re.error as e:
                raise ConfigError(f"permissions for {p['user']}: {k} = {rx!r} is not a regular expression: {e}") from e
        perms.append(Permission(str(p["user"]), str(p["vhost"]), **kinds))
    return tuple(perms)


def _apply_access(doc: dict[str, Any]) -> dict[str, Any]:
    """[[vhosts]], [[permissions]], [tls] and [limits]."""
    changes: dict[str, Any] = {}
    if "vhosts" in doc:
        names = [str(v.get("name", "")) for v in doc["vhosts"]]
        if not all(names):
            raise ConfigError("every [[vhosts]] entry needs a name")
        changes["vhosts"] = tuple(dict.fromkeys(names))
    perms = _permissions(doc.get("permissions", []), "[[permissions]]")
    if perms:
        changes["permissions"] = tuple(perms)
    tls = doc.get("tls")
    if tls is not None:
        if not tls.get("certfile") or not tls.get("keyfile"):
            raise ConfigError("[tls] needs certfile and keyfile")
        changes["tls"] = TlsConfig(
            Path(tls["certfile"]), Path(tls["keyfile"]),
            _int(tls, "port", "tls", 1) or DEFAULT_TLS_PORT,
            Path(tls["cafile"]) if tls.get("cafile") else None,
            bool(tls.get("verify_peer", False)),
            _int(tls, "advertised_port", "tls", 1))
    limits = doc.get("limits", {})
    for key in ("max_connections", "max_connections_per_user", "max_streams", "max_partitions",
                "max_buffered_bytes"):
        v = _int(limits, key, "limits")
        if v is not None:
            changes[key] = v
    return changes


def loopback_address(address: str) -> bool:
    """A literal IPv4 or IPv6 address of the loopback (an IPv4-mapped one too); False for
    anything else, a name included."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # fe80::1%lo: the zone is no part
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


Resolver = Callable[..., list[tuple[Any, ...]]]


def is_loopback_host(host: str, resolve: Resolver | None = None) -> bool:
    """Whether a listener on ``host`` is reachable from this machine only: a literal address
    must be a loopback one; a name must resolve (``resolve``, getaddrinfo's signature; None:
    socket.getaddrinfo), and to loopback addresses only, every one of them. A name that does
    not resolve, or resolves to any other address too, is not (so ``127.attacker.example`` is
    judged by where it points, not by how it is spelt)."""
    if not host:
        return False  # every interface
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    else:
        return loopback_address(host)
    try:
        infos = (resolve or socket.getaddrinfo)(host, None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):  # socket.gaierror is an OSError
        return False
    addresses = {str(info[4][0]) for info in infos}
    return bool(addresses) and all(loopback_address(a) for a in addresses)


def with_port(cfg: BrokerConfig, protocol: str, port: int | None) -> BrokerConfig:
    """``serve --mega-port`` / ``--rsio-port``: None keeps [listeners.<protocol>]; 0 turns it
    off; else it listens on that port, on the configured host if any, else 127.0.0.1 (neither
    protocol has authentication)."""
    if port is None:
        return cfg
    own = [lst for lst in cfg.other_listeners if lst.protocol == protocol]
    others = tuple(lst for lst in cfg.other_listeners if lst.protocol != protocol)
    if port:
        host = own[0].host if own else "127.0.0.1"
        others = (*others, Listener(protocol, host, port, own[0].tls if own else False))
    return replace(cfg, other_listeners=others)


def with_metrics_port(cfg: BrokerConfig, port: int | None) -> BrokerConfig:
    """``serve --metrics-port``: None keeps [listeners.metrics] (or the default); 0 turns the
    endpoint off; else it listens on that port (the configured host, else [server] host), and
    a port it cannot listen on stops the broker."""
    if port is None:
        return cfg
    if port == 0:
        return replace(cfg, metrics=None)
    return replace(cfg, metrics=replace(cfg.metrics or MetricsListener(), port=port, required=True))


def with_http_port(cfg: BrokerConfig, port: int | None) -> BrokerConfig:
    """``serve --http-port``: as ``with_metrics_port``, for the management API."""
    if port is None:
        return cfg
    if port == 0:
        return replace(cfg, http=None)
    return replace(cfg, http=replace(cfg.http or HttpListener(), port=port, required=True))


def _validate(cfg: BrokerConfig) -> None:
    if not 0 < cfg.port < 65536:
        raise ConfigError(f"port must be in 1..65535, got {cfg.port}")
    if cfg.fsync not in FSYNC_POLICIES:
        raise ConfigError(f"storage.fsync must be one of {', '.join(FSYNC_POLICIES)}, got {cfg.fsync!r}")
    if cfg.frame_max and cfg.frame_max < 8192:
        raise ConfigError("server.frame_max must be 0 (no limit) or at least 8192")
    if cfg.request_timeout < 1:
        raise ConfigError(f"server.request_timeout must be at least 1 second, got {cfg.request_timeout}")
    if cfg.frame_limit < max(cfg.frame_max, 8192):
        raise ConfigError(f"server.frame_limit must be at least server.frame_max and 8192, "
                          f"got {cfg.frame_limit}")
    if cfg.frame_timeout < 1:
        raise ConfigError(f"server.frame_timeout must be at least 1 second, got {cfg.frame_timeout}")
    if "/" not in cfg.vhosts:
        raise ConfigError('[[vhosts]] must include "/"')
    if not cfg.users:
        raise ConfigError("at least one [[users]] entry is needed")
    if cfg.peers and (cfg.member is None or cfg.member >= len(cfg.peers)):
        raise ConfigError(f"cluster.peers lists {len(cfg.peers)} brokers: cluster.member must be "
                          f"one of 0..{len(cfg.peers) - 1}, got {cfg.member}")
    if cfg.replication_user is not None and all(u.name != cfg.replication_user for u in cfg.users):
        raise ConfigError(f"cluster.replication_user {cfg.replication_user!r} is not a configured user")
    if cfg.driver_user is not None and all(u.name != cfg.driver_user for u in cfg.users):
        raise ConfigError(f"cluster.driver_user {cfg.driver_user!r} is not a configured user")
    users = {u.name for u in cfg.users}
    for p in cfg.permissions:
        if p.user not in users:
            raise ConfigError(f"permissions for {p.user!r}: no such user in [[users]]")
        if p.vhost not in cfg.vhosts:
            raise ConfigError(f"permissions for {p.user}: unknown vhost {p.vhost!r}")
    if not cfg.listeners:
        raise ConfigError("no listener: [listeners.rabbitmq] enabled = false needs [tls] or another")
    for listener in cfg.listeners:
        if not 0 < listener.port < 65536:
            raise ConfigError(f"listeners.{listener.protocol}.port must be in 1..65535, got {listener.port}")
        if listener.tls and cfg.tls is None:
            raise ConfigError(f"[listeners.{listener.protocol}] tls = true needs a [tls] section")
        if listener.protocol in UNAUTHENTICATED and not is_loopback_host(listener.host) and not (
                listener.tls and cfg.tls is not None and cfg.tls.verify_peer):
            name = listener.protocol
            raise ConfigError(f"[listeners.{name}] host {listener.host!r}: {name.upper()} has no "
                              "authentication, so it listens on loopback only (a loopback address, "
                              "or a name every address of which is one), or with tls = true "
                              "and [tls] verify_peer = true (client certificates)")
    mega = any(lst.protocol == "mega" for lst in cfg.listeners)
    if mega and not 0 < cfg.mega_max_payload_bytes <= cfg.frame_limit:
        raise ConfigError(f"listeners.mega.max_payload_bytes must be in 1..server.frame_limit "
                          f"({cfg.frame_limit}), got {cfg.mega_max_payload_bytes}")
    if mega and not 0 < cfg.mega_max_topic_bytes <= 255:
        raise ConfigError(f"listeners.mega.max_topic_bytes must be in 1..255 (a stream name's "
                          f"bytes), got {cfg.mega_max_topic_bytes}")
    if any(lst.protocol == "rsio" for lst in cfg.listeners):
        if not 0 < cfg.rsio_max_element_bytes <= cfg.frame_limit:
            raise ConfigError(f"listeners.rsio.max_element_bytes must be in 1..server.frame_limit "
                              f"({cfg.frame_limit}), got {cfg.rsio_max_element_bytes}")
        if not 0 < cfg.rsio_split_bytes <= cfg.rsio_max_element_bytes:
            raise ConfigError(f"listeners.rsio.split_bytes must be in 1..max_element_bytes, "
                              f"got {cfg.rsio_split_bytes}")
    if cfg.metrics is not None and not 0 < cfg.metrics.port < 65536:
        raise ConfigError(f"listeners.metrics.port must be in 1..65535, got {cfg.metrics.port}")
    if cfg.http is not None and not 0 < cfg.http.port < 65536:
        raise ConfigError(f"listeners.http.port must be in 1..65535, got {cfg.http.port}")
    if any(lst.protocol == "sbp" for lst in cfg.listeners) and not (
            16 <= cfg.sbp_max_frame_bytes <= cfg.frame_limit):
        raise ConfigError(f"listeners.sbp.max_frame_bytes must be in 16..server.frame_limit "
                          f"({cfg.frame_limit}), got {cfg.sbp_max_frame_bytes}")
    if cfg.cluster_tls and cfg.tls is None:
        raise ConfigError("[cluster] tls = true needs a [tls] section: its certificate is what "
                          "this broker presents to the other brokers, its cafile what it checks "
                          "theirs against")
    if cfg.cluster_tls is False and cfg.tls is not None and not cfg.rabbitmq_listener:
        raise ConfigError("[cluster] tls = false needs the plain listener: with [listeners."
                          "rabbitmq] enabled = false the brokers reach each other on [tls] port "
                          "only (leave tls out or set it to true)")
    if cfg.tls is not None and cfg.tls.verify_peer and cfg.tls.cafile is None:
        raise ConfigError("[tls] verify_peer needs a cafile")
    if cfg.retention.max_segment_size_bytes > MAX_SEGMENT_BYTES:
        raise ConfigError(f"retention.max_segment_size_bytes must be at most {MAX_SEGMENT_BYTES}")
