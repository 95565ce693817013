"""The broker's users and permissions: [[users]] and [[permissions]] tables, of the main
config file or of server.users_file (a file of those tables only, reloaded while the broker
runs: reload.py), and the two combined, each user defined once and each (user, vhost) given
permissions once."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model import ConfigError, Permission, User
from .values import int_key


def parse_users(entries: Any, where: str) -> tuple[User, ...]:
    """[[users]] tables (``where`` names them in messages): a name, a password,
    loopback_only (default: true for guest only), max_connections."""
    if not isinstance(entries, list) or not all(isinstance(u, dict) for u in entries):
        raise ConfigError(f"{where} must be a list of tables")
    users = []
    for u in entries:
        if not u.get("name") or "password" not in u:
            raise ConfigError(f"every {where} entry needs a name and a password")
        users.append(User(str(u["name"]), str(u["password"]),
                          bool(u.get("loopback_only", u["name"] == "guest")),
                          int_key(u, "max_connections", "users") or 0))
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
    return UsersFile(parse_users(doc.get("users", []), f"[[users]] in {path}"),
                     parse_permissions(doc.get("permissions", []), f"[[permissions]] in {path}"))


def combine_users(config_users: tuple[User, ...], config_permissions: tuple[Permission, ...],
                  vhosts: tuple[str, ...], users_file: Path
                  ) -> tuple[tuple[User, ...], tuple[Permission, ...]]:
    """The broker's users and permissions: the main config's, then the users file's (read
    now). The file's permissions must name a user of either and one of ``vhosts`` (vhosts are
    the main config's only), and no (user, vhost) may have two entries: one of them would be
    silently ignored."""
    read = _read_users_file(users_file)
    users = check_unique((*config_users, *read.users))
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


def check_unique(users: tuple[User, ...]) -> tuple[User, ...]:
    """``users``, refused when a name is defined twice."""
    seen: set[str] = set()
    for u in users:
        if u.name in seen:
            raise ConfigError(f"user {u.name!r} is defined twice")
        seen.add(u.name)
    return users


def parse_permissions(entries: Any, where: str) -> tuple[Permission, ...]:
    """[[permissions]] tables: a user, a vhost, and configure, write and read regular
    expressions (default ``.*``), each compiled here."""
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
