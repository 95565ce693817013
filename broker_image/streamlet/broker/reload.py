"""Reloading the users file and the TLS certificate while the broker runs, without a restart.

The files ``[server] users_file`` and ``[tls] certfile``, ``keyfile``, ``cafile`` name are read
again when their content changes (checked every ``[server] reload_interval`` seconds) and at
once on SIGHUP. A change is applied whole or not at all: one that does not load keeps the old
one in force, is logged and counted (``streamlet_reload_failures_total``). Users and their
permissions are swapped in one step; a removed user's connections are closed; new TLS
handshakes use the new certificate.
Mechanism: docs/configuration.md#reloading-users-and-certificates.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .config.model import BrokerConfig, ConfigError, User
from .config.users import combine_users
from .mgmt.closing import close
from .periodic import every

if TYPE_CHECKING:
    from .server import Broker

log = logging.getLogger("streamlet.broker.reload")

Part = Literal["users", "tls"]
#: a file's content, as its SHA-256 (None: it could not be read)
Fingerprint = str | None


def watched(cfg: BrokerConfig) -> dict[Part, tuple[Path, ...]]:
    """The files each reloadable part is read from (a part without files is not there)."""
    parts: dict[Part, tuple[Path, ...]] = {}
    if cfg.users_file is not None:
        parts["users"] = (cfg.users_file,)
    if cfg.tls is not None:
        parts["tls"] = tuple(p for p in (cfg.tls.certfile, cfg.tls.keyfile, cfg.tls.cafile)
                             if p is not None)
    return parts


def fingerprint(path: Path) -> Fingerprint:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def fingerprints(cfg: BrokerConfig) -> dict[Path, Fingerprint]:
    """Every watched file's fingerprint now."""
    return {p: fingerprint(p) for paths in watched(cfg).values() for p in paths}


def changed_parts(parts: Mapping[Part, tuple[Path, ...]], before: Mapping[Path, Fingerprint],
                  now: Mapping[Path, Fingerprint]) -> list[Part]:
    """The parts one of whose files has another fingerprint now (in ``parts``' order)."""
    return [part for part, paths in parts.items()
            if any(before.get(p) != now.get(p) for p in paths)]


def replication_in_use(cfg: BrokerConfig) -> tuple[str, str] | None:
    """The (user, password) this broker's links to other brokers log in with, taken at its
    start (replication and forwarding keep them); None: no cluster, no such links."""
    return cfg.replication_credentials if cfg.peers or cfg.directory_file else None


def check_users(cfg: BrokerConfig, users: tuple[User, ...],
                replication: tuple[str, str] | None) -> list[str]:
    """Raise ConfigError if ``users`` cannot replace ``cfg.users``; else return the warnings
    to log. Refused: no user at all; losing cluster.replication_user or driver_user; and no
    longer accepting ``replication``, the credentials the brokers' links log in to each other
    with (each broker took them at its start, so removing that user or changing its password
    needs the brokers restarted). Which user comes first may change: links keep the one they
    have, and the replication commands are taken from it (its name, taken at the start)."""
    if not users:
        raise ConfigError("no user left: at least one [[users]] entry is needed")
    names = {u.name for u in users}
    if cfg.replication_user is not None and cfg.replication_user not in names:
        raise ConfigError(f"cluster.replication_user {cfg.replication_user!r} would be removed")
    if cfg.driver_user is not None and cfg.driver_user not in names:
        raise ConfigError(f"cluster.driver_user {cfg.driver_user!r} would be removed")
    if replication is not None and replication not in {(u.name, u.password) for u in users}:
        raise ConfigError(f"user {replication[0]!r} would be removed or its password changed, "
                          "but the brokers log in to each other as it (taken at their start): "
                          "that needs the brokers restarted")
    dormant = sorted({p.user for p in cfg.config_permissions} - names)
    return [f"[[permissions]] of user {name!r}, not in the users any more, stay in force "
            "(should it come back); the broker will not start with this configuration "
            "until the entry is removed" for name in dormant]


class Reloader:
    """Watches the files of ``watched(broker.config)`` and applies their changes to ``broker``.
    ``seen``: the files' fingerprints from before the broker loaded its streams (which can take
    a while), so that a change meanwhile is not missed; default: now."""

    def __init__(self, broker: Broker, seen: dict[Path, Fingerprint] | None = None) -> None:
        self.broker = broker
        self.parts = watched(broker.config)
        self.replication = replication_in_use(broker.config)
        self.seen = fingerprints(broker.config) if seen is None else seen
        now = time.time()  # what is in force was loaded at the start
        for part in self.parts:
            broker.reloaded_at[part] = now
            broker.reload_failures[part] += 0

    def check(self, force: bool = False) -> list[Part]:
        """Reload the parts whose files changed since the last check (every part: ``force``);
        return those reloaded. A failed reload is not retried until a file changes again."""
        now = fingerprints(self.broker.config)
        parts = list(self.parts) if force else changed_parts(self.parts, self.seen, now)
        self.seen = now
        for part in parts:
            ok = self._reload_users() if part == "users" else self._reload_tls()
            if ok:
                self.broker.reloaded_at[part] = time.time()
            else:
                self.broker.reload_failures[part] += 1
        return parts

    def hangup(self) -> None:
        """SIGHUP: reload everything now."""
        log.info("SIGHUP: reloading %s", ", ".join(self.parts) or "nothing (no users_file, no [tls])")
        try:
            self.check(force=True)
        except Exception:  # a signal handler must not take the loop down
            log.exception("reload on SIGHUP failed")

    async def run(self) -> None:
        """Check every reload_interval seconds (not at all when it is 0)."""
        interval = self.broker.config.reload_interval
        if not interval or not self.parts:
            return
        await every(interval, self.check, log, "reload check")

    def _reload_users(self) -> bool:
        cfg = self.broker.config
        assert cfg.users_file is not None
        try:
            users, permissions = combine_users(cfg.config_users, cfg.config_permissions,
                                               cfg.vhosts, cfg.users_file)
            warnings = check_users(cfg, users, self.replication)
        except ConfigError as e:
            log.error("users not reloaded, the old ones stay in force: %s", e)
            return False
        for warning in warnings:
            log.warning("users reloaded: %s", warning)
        before = {u.name for u in cfg.users}
        after = {u.name for u in users}
        changed = sorted({p.user for p in set(cfg.permissions) ^ set(permissions)})
        gone = self.broker.set_users(users, permissions)
        log.info("users reloaded from %s: %d users (added: %s; removed: %s), %d permissions "
                 "(changed for: %s)", cfg.users_file, len(users),
                 ", ".join(sorted(after - before)) or "none",
                 ", ".join(sorted(before - after)) or "none", len(permissions),
                 ", ".join(changed) or "none")
        for conn in gone:
            log.info("closing a connection of removed user %s", conn.user)
            close(conn, f"user {conn.user} was removed")
        return True

    def _reload_tls(self) -> bool:
        tls = self.broker.tls
        assert tls is not None
        try:
            tls.reload()
        except ConfigError as e:
            log.error("TLS certificate not reloaded, the old one stays in force: %s", e)
            return False
        log.info("TLS certificate reloaded from %s: new TLS connections use it", tls.cfg.certfile)
        return True
