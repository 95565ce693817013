"""The broker's users, in a Secret: the operator's own user, those of spec.usersSecret, the
export users (handlers/broker.py gathers them) and the users only spec.permissions names, and
the permissions of them all (spec.permissions, then the export users').

Users and permissions are in one file because the broker reloads that file whole, without a
restart: a user is never known to a broker without its permissions (a user with no
permission entry would have full access), and a permissions change rolls no pod. The vhosts
stay in the config (builders/configmap.py): the broker reads them at start only."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from .. import names
from ..model import BrokerModel, Permission
from .common import metadata, toml_string
from .configmap import vhosts


@dataclass(frozen=True)
class Access:
    """The vhosts (in the broker's config) and the permissions (in its users file) the broker
    gets, and what was wrong with the spec."""

    vhosts: tuple[str, ...]
    permissions: tuple[Permission, ...]
    problems: tuple[str, ...] = ()


def _regex_problem(pattern: str) -> str | None:
    try:
        re.compile(pattern)  # the broker's own engine (Python's re), not the API server's CEL
    except re.error as e:
        return str(e)
    return None


def plan_access(broker: BrokerModel) -> Access:
    """spec.vhosts and spec.permissions made into a config the broker accepts, whatever the
    spec says: the broker refuses to start on a bad entry, and a crash-looping pod serves no
    one. Every fix fails closed: a bad regular expression becomes "" (denies all), a
    permission on an unknown vhost is dropped, and a user left with no permission at all gets
    a deny-all one on "/" (a user without any entry would have full access). Each fix is a
    problem, for the Broker's AccessConfigured condition."""
    known = vhosts(broker)
    problems: list[str] = []
    kept: dict[tuple[str, str], Permission] = {}
    restricted: list[str] = []
    for p in broker.permissions:
        if p.user == names.OPERATOR_USER:  # it creates, moves and replicates every stream
            problems.append(f"permissions of {p.user!r}: the operator's own user is never "
                            "restricted (left out)")
            continue
        restricted.append(p.user)
        if p.vhost not in known:
            problems.append(f"permission of {p.user!r} on vhost {p.vhost!r}: no such vhost in "
                            "spec.vhosts (left out)")
            continue
        fixed = p
        for kind in ("configure", "write", "read"):
            error = _regex_problem(getattr(p, kind))
            if error is not None:
                problems.append(f"permission of {p.user!r} on {p.vhost!r}: {kind} "
                                f"{getattr(p, kind)!r} is not a regular expression ({error}); "
                                "it denies everything instead")
                fixed = replace(fixed, **{kind: ""})
        if (p.user, p.vhost) in kept:
            problems.append(f"permissions of {p.user!r} on {p.vhost!r} given twice (the last one "
                            "counts)")
        kept[(p.user, p.vhost)] = fixed
    for user in dict.fromkeys(restricted):
        if not any(u == user for u, _ in kept):
            kept[(user, "/")] = Permission(user, "/", "", "", "")
    return Access(known, tuple(kept.values()), tuple(problems))


def unknown_users(broker: BrokerModel, users: Collection[str]) -> list[str]:
    """Users spec.permissions names that the users Secret does not define (broker_users
    renders them without a usable password: a client certificate naming them is their only way
    in)."""
    return sorted({p.user for p in broker.permissions} - set(users))


def render_users(users: dict[str, str], permissions: tuple[Permission, ...] = ()) -> str:
    """`[[users]]` and `[[permissions]]` tables: the file the broker's ``server.users_file``
    names. The operator's user first: followers log in to their leaders as the first user
    (the broker's default cluster.replication_user), which must not be one spec.permissions
    restricts."""
    out = []
    for user in sorted(users, key=lambda u: (u != names.OPERATOR_USER, u)):
        out += ["[[users]]", f"name = {toml_string(user)}", f"password = {toml_string(users[user])}",
                "loopback_only = false", ""]
    for p in permissions:
        out += ["[[permissions]]", f"user = {toml_string(p.user)}",
                f"vhost = {toml_string(p.vhost)}", f"configure = {toml_string(p.configure)}",
                f"write = {toml_string(p.write)}", f"read = {toml_string(p.read)}", ""]
    return "\n".join(out)


def certificate_only_password(users: dict[str, str], user: str) -> str:
    """A password no one is told, for a user spec.permissions names but no Secret defines: the
    broker refuses permissions of undefined users, so it is defined, and can log in only with
    a client certificate naming it (SASL EXTERNAL). Derived from the other users' passwords,
    so it stays the same from one reconciliation to the next (no Secret churn)."""
    key = "\0".join(users[u] for u in sorted(users)).encode()
    return hmac.new(key, user.encode(), hashlib.sha256).hexdigest()


def broker_users(broker: BrokerModel, users: dict[str, str]) -> dict[str, str]:
    """``users`` and every user the config's permissions name, so the config is always valid."""
    extra = {u: certificate_only_password(users, u) for u in unknown_users(broker, users)}
    return {**users, **extra}


def build_users_secret(broker: BrokerModel, users: dict[str, str]) -> dict[str, Any]:
    text = render_users(broker_users(broker, users), plan_access(broker).permissions)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": metadata(broker, names.users_secret(broker.name)),
        "data": {names.USERS_KEY: base64.b64encode(text.encode()).decode()},
    }
