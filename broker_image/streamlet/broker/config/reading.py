"""Reading a config file into a BrokerConfig: defaults < file < environment < flags, every
value checked (a misspelt key is refused, not ignored) and the whole validated; a further
protocol's [listeners.<protocol>] is read by its row's settings class (broker/protocols.py)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from .environment import absolute_paths, from_environment, is_loopback_host, member
from .model import (
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_MAX_CONSUMERS,
    DEFAULT_METRICS_MAX_STREAMS,
    DEFAULT_METRICS_PORT,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_TLS_PORT,
    FSYNC_POLICIES,
    MAX_SEGMENT_BYTES,
    BrokerConfig,
    ConfigError,
    HttpListener,
    Listener,
    MetricsListener,
    ProtocolSettings,
    Retention,
    SpokenProtocol,
    TlsConfig,
)
from .users import combine_users, parse_permissions, parse_users
from .values import int_key, parse_duration_ms, peers, reload_interval


def read(path: Path | None, protocols: Iterable[SpokenProtocol], *, metrics_port: int | None = None,
         http_port: int | None = None, **overrides: Any) -> BrokerConfig:
    """Build the config of a broker speaking ``protocols``: defaults < file < environment <
    non-None keyword overrides (flags). ``<protocol>_port`` (a further protocol's): serve
    --<protocol>-port (with_port); ``metrics_port``: --metrics-port (with_metrics_port);
    ``http_port``: --http-port (with_http_port)."""
    spoken = tuple(protocols)
    ports = {p.name: overrides.pop(f"{p.name}_port", None) for p in spoken if p.settings is not None}
    cfg = BrokerConfig(settings={p.name: p.settings() for p in spoken if p.settings is not None},
                       unauthenticated=frozenset(p.name for p in spoken if not p.authenticated))
    if path is not None:
        try:
            doc = tomllib.loads(Path(path).read_text())
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror}") from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from e
        cfg = _apply_file(cfg, absolute_paths(doc, Path(path).parent), spoken)
    cfg = replace(cfg, **from_environment())
    flags = {k: v for k, v in overrides.items() if v is not None}
    if "data_dir" in flags:
        flags["data_dir"] = Path(flags["data_dir"])
    cfg = replace(cfg, **flags)
    for name, port in ports.items():
        cfg = with_port(cfg, name, port)
    cfg = with_http_port(with_metrics_port(cfg, metrics_port), http_port)
    _validate(cfg)
    return cfg


#: the keys of the sections read here (a misspelt key is refused, not ignored)
SECTION_KEYS = {
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


def _apply_file(cfg: BrokerConfig, doc: dict[str, Any],
                protocols: tuple[SpokenProtocol, ...]) -> BrokerConfig:
    known = {"server", "storage", "retention", "users", "vhosts", "permissions", "tls", "limits",
             "cluster", "listeners"}
    unknown = set(doc) - known
    if unknown:
        raise ConfigError(f"unknown config section(s): {', '.join(sorted(unknown))}")
    for section, keys in SECTION_KEYS.items():
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
        v = int_key(server, key, "server")
        if v is not None:
            changes[key] = v
    storage = doc.get("storage", {})
    if "fsync" in storage:
        changes["fsync"] = str(storage["fsync"])
    v = int_key(storage, "max_open_files", "storage", 16)
    if v is not None:
        changes["max_open_files"] = v
    ret = doc.get("retention", {})
    if ret:
        max_age = parse_duration_ms(str(ret["max_age"])) if ret.get("max_age") else None
        max_len = int_key(ret, "max_length_bytes", "retention") or None
        seg = int_key(ret, "max_segment_size_bytes", "retention", 1) or DEFAULT_SEGMENT_BYTES
        changes["retention"] = Retention(max_age, max_len, seg)
    if "reload_interval" in server:
        changes["reload_interval"] = reload_interval(server["reload_interval"])
    access = _apply_access(doc)
    users = parse_users(doc.get("users", []), "[[users]]") if "users" in doc else None
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
        changes["member"] = member(cluster["member"])
    if "replication_user" in cluster:
        changes["replication_user"] = str(cluster["replication_user"])
    if "driver_user" in cluster:
        changes["driver_user"] = str(cluster["driver_user"])
    if "peers" in cluster:
        changes["peers"] = peers(cluster["peers"])
    if "tls" in cluster:
        if not isinstance(cluster["tls"], bool):
            raise ConfigError(f"cluster.tls must be true or false, got {cluster['tls']!r}")
        changes["cluster_tls"] = cluster["tls"]
    if "resume_roles" in cluster:
        if not isinstance(cluster["resume_roles"], bool):
            raise ConfigError(f"cluster.resume_roles must be true or false, got {cluster['resume_roles']!r}")
        changes["resume_roles"] = cluster["resume_roles"]
    changes.update(access)
    changes.update(_listeners(doc.get("listeners", {}), str(changes.get("host", cfg.host)),
                              protocols))
    return replace(cfg, **changes)


#: the keys of every further protocol's [listeners.<protocol>], besides its settings' own
LISTENER_KEYS = frozenset({"enabled", "host", "port", "tls", "max_connections", "idle_timeout"})


def settings_keys(settings: type[ProtocolSettings]) -> frozenset[str]:
    """A protocol's own keys of its section: its settings class's fields."""
    return frozenset(f.name for f in fields(settings))


def _listeners(section: Any, default_host: str,
               protocols: tuple[SpokenProtocol, ...]) -> dict[str, Any]:
    """[listeners.rabbitmq] enabled and max_connections; [listeners.<protocol>] host, port,
    tls, enabled, max_connections, idle_timeout and its settings' keys (``protocols``')."""
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
    for protocol in ("rabbitmq", *(p.name for p in protocols if p.settings is not None)):
        table = section.get(protocol, {})
        budget = int_key(table, "max_connections", f"listeners.{protocol}")
        if budget is not None:
            budgets.append((protocol, budget))
        idle = int_key(table, "idle_timeout", f"listeners.{protocol}")
        if idle is not None:
            idles.append((protocol, idle))
    changes["listener_budgets"], changes["idle_timeouts"] = tuple(budgets), tuple(idles)
    if "metrics" in section:
        changes["metrics"] = _metrics_listener(section["metrics"])
    if "http" in section:
        changes["http"] = _http_listener(section["http"])
    own = {p.name: p.settings for p in protocols if p.settings is not None}
    changes["settings"] = {name: kind.parse(section.get(name, {}), f"listeners.{name}")
                           for name, kind in own.items()}
    others = []
    for protocol, table in section.items():
        if protocol in ("rabbitmq", "metrics", "http"):
            continue
        where = f"listeners.{protocol}"
        # (a protocol the broker does not speak is refused where the listeners are made)
        kind = own.get(protocol)
        extra = set(table) - LISTENER_KEYS - (settings_keys(kind) if kind is not None else set())
        if kind is not None and extra:
            raise ConfigError(f"unknown key(s) in [{where}]: {', '.join(sorted(extra))}")
        if not table.get("enabled", True):
            continue
        port = int_key(table, "port", where, 1)
        if port is None:
            raise ConfigError(f"[{where}] needs a port")
        others.append(Listener(protocol, str(table.get("host", default_host)), port,
                               bool(table.get("tls", False))))
    changes["other_listeners"] = tuple(others)
    return changes


def _metrics_listener(table: dict[str, Any]) -> MetricsListener | None:
    """[listeners.metrics]: enabled, host, port, max_streams, max_consumers, tls_port.
    Configured, it is required: a port it cannot listen on stops the broker. tls_port (HTTPS,
    [tls]'s certificate) is served beside the plain port, never instead of it."""
    extra = set(table) - {"enabled", "host", "port", "max_streams", "max_consumers", "tls_port"}
    if extra:
        raise ConfigError(f"unknown key(s) in [listeners.metrics]: {', '.join(sorted(extra))}")
    if not table.get("enabled", True):
        return None
    where = "listeners.metrics"
    port = int_key(table, "port", where)
    if port == 0:
        return None
    streams = int_key(table, "max_streams", where)
    consumers = int_key(table, "max_consumers", where)
    tls_port = int_key(table, "tls_port", where)
    return MetricsListener(
        port or DEFAULT_METRICS_PORT, str(table["host"]) if "host" in table else None, True,
        DEFAULT_METRICS_MAX_STREAMS if streams is None else streams,
        DEFAULT_METRICS_MAX_CONSUMERS if consumers is None else consumers, tls_port or None)


def _http_listener(table: dict[str, Any]) -> HttpListener | None:
    """[listeners.http]: enabled, host, port, tls_port. Configured, it is required, as
    metrics'. As RabbitMQ's management listeners: with tls_port (HTTPS, [tls]'s certificate)
    plain HTTP is served only when port is given too (and not 0)."""
    extra = set(table) - {"enabled", "host", "port", "tls_port"}
    if extra:
        raise ConfigError(f"unknown key(s) in [listeners.http]: {', '.join(sorted(extra))}")
    port = int_key(table, "port", "listeners.http")
    tls_port = int_key(table, "tls_port", "listeners.http")
    if not table.get("enabled", True) or (port == 0 and not tls_port):
        return None
    if tls_port:
        return HttpListener(port or None, str(table["host"]) if "host" in table else None, True,
                            tls_port)
    return HttpListener(port or DEFAULT_HTTP_PORT,
                        str(table["host"]) if "host" in table else None, True)


def _apply_access(doc: dict[str, Any]) -> dict[str, Any]:
    """[[vhosts]], [[permissions]], [tls] and [limits]."""
    changes: dict[str, Any] = {}
    if "vhosts" in doc:
        names = [str(v.get("name", "")) for v in doc["vhosts"]]
        if not all(names):
            raise ConfigError("every [[vhosts]] entry needs a name")
        changes["vhosts"] = tuple(dict.fromkeys(names))
    perms = parse_permissions(doc.get("permissions", []), "[[permissions]]")
    if perms:
        changes["permissions"] = tuple(perms)
    tls = doc.get("tls")
    if tls is not None:
        if not tls.get("certfile") or not tls.get("keyfile"):
            raise ConfigError("[tls] needs certfile and keyfile")
        changes["tls"] = TlsConfig(
            Path(tls["certfile"]), Path(tls["keyfile"]),
            int_key(tls, "port", "tls", 1) or DEFAULT_TLS_PORT,
            Path(tls["cafile"]) if tls.get("cafile") else None,
            bool(tls.get("verify_peer", False)),
            int_key(tls, "advertised_port", "tls", 1))
    limits = doc.get("limits", {})
    for key in ("max_connections", "max_connections_per_user", "max_streams", "max_partitions",
                "max_buffered_bytes"):
        v = int_key(limits, key, "limits")
        if v is not None:
            changes[key] = v
    return changes


def with_port(cfg: BrokerConfig, protocol: str, port: int | None) -> BrokerConfig:
    """``serve --<protocol>-port`` (--mega-port, --rsio-port, --sbp-port): None keeps
    [listeners.<protocol>]; 0 turns it off; else it listens on that port, on the configured
    host if any, else 127.0.0.1 (none of them has authentication)."""
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


def _check_web_ports(cfg: BrokerConfig, name: str, port: int | None, tls_port: int | None,
                     whose: str) -> None:
    """[listeners.<name>]'s plain and HTTPS ports: each in range, HTTPS only with [tls],
    the two apart."""
    for key, value in (("port", port), ("tls_port", tls_port)):
        if value is not None and not 0 < value < 65536:
            raise ConfigError(f"listeners.{name}.{key} must be in 1..65535, got {value}")
    if tls_port is not None and cfg.tls is None:
        raise ConfigError(f"[listeners.{name}] tls_port needs a [tls] section (its "
                          f"certificate is {whose})")
    if tls_port is not None and port == tls_port:
        raise ConfigError(f"[listeners.{name}] port and tls_port are both {port}")


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
        if listener.protocol in cfg.unauthenticated and not is_loopback_host(listener.host) and not (
                listener.tls and cfg.tls is not None and cfg.tls.verify_peer):
            name = listener.protocol
            raise ConfigError(f"[listeners.{name}] host {listener.host!r}: {name.upper()} has no "
                              "authentication, so it listens on loopback only (a loopback address, "
                              "or a name every address of which is one), or with tls = true "
                              "and [tls] verify_peer = true (client certificates)")
    listening = {lst.protocol for lst in cfg.listeners}
    for protocol, settings in cfg.settings.items():
        if protocol in listening:
            settings.check(cfg)
    if cfg.metrics is not None:
        _check_web_ports(cfg, "metrics", cfg.metrics.port, cfg.metrics.tls_port,
                         "the metrics endpoint's")
    if cfg.http is not None:
        _check_web_ports(cfg, "http", cfg.http.port, cfg.http.tls_port, "the management API's")
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
