"""The broker's users, in a Secret: the operator's own user, those of spec.usersSecret, the
export users (handlers/broker.py gathers them) and the users only spec.permissions names."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from .. import names
from ..model import BrokerModel
from .common import metadata, toml_string
from .configmap import unknown_users


def render_users(users: dict[str, str]) -> str:
    """`[[users]]` tables: the file the broker's ``server.users_file`` names. The operator's
    user first: followers log in to their leaders as the first user (the broker's default
    cluster.replication_user), which must not be one spec.permissions restricts."""
    out = []
    for user in sorted(users, key=lambda u: (u != names.OPERATOR_USER, u)):
        out += ["[[users]]", f"name = {toml_string(user)}", f"password = {toml_string(users[user])}",
                "loopback_only = false", ""]
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
    text = render_users(broker_users(broker, users))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": metadata(broker, names.users_secret(broker.name)),
        "data": {names.USERS_KEY: base64.b64encode(text.encode()).decode()},
    }
