"""The broker's users, in a Secret: the operator's own user plus those of spec.usersSecret."""

from __future__ import annotations

import base64
from typing import Any

from .. import names
from ..model import BrokerModel
from .common import metadata, toml_string


def render_users(users: dict[str, str]) -> str:
    """`[[users]]` tables: the file the broker's ``server.users_file`` names."""
    out = []
    for user in sorted(users):
        out += ["[[users]]", f"name = {toml_string(user)}", f"password = {toml_string(users[user])}",
                "loopback_only = false", ""]
    return "\n".join(out)


def build_users_secret(broker: BrokerModel, users: dict[str, str]) -> dict[str, Any]:
    text = render_users(users)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": metadata(broker, names.users_secret(broker.name)),
        "data": {names.USERS_KEY: base64.b64encode(text.encode()).decode()},
    }
