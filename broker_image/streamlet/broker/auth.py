"""Who may log in, for every protocol that authenticates: a user name and password checked
against the configured users (``check``), and the loopback rule of loopback-only users
(RabbitMQ's guest), whatever carried the credentials (RabbitMQ's SASL, broker/rabbitmq/sasl.py;
the management API's HTTP Basic, broker/mgmt/identity.py)."""

from __future__ import annotations

import hmac
from enum import Enum

from .config.environment import loopback_address
from .config.model import User


class Login(Enum):
    """The outcome of a name and password check."""

    ACCEPTED = "accepted"
    REFUSED = "refused"  # no such user, or another password
    LOOPBACK_ONLY = "loopback only"  # the user logs in from this machine only


def is_loopback(address: str | None) -> bool:
    """Whether a peer connected from this machine: its address is a loopback one (an
    IPv4-mapped one too, as a dual-stack listener sees IPv4 peers)."""
    if not address:
        return True  # a Unix socket or a socketpair: local by construction
    return loopback_address(address)


def check(users: tuple[User, ...], name: str, password: str, peer: str | None) -> Login:
    """``name`` and ``password`` against ``users``, a loopback-only user from this machine only.
    The password is compared in constant time."""
    for user in users:
        if user.name == name and hmac.compare_digest(user.password.encode(), password.encode()):
            if user.loopback_only and not is_loopback(peer):
                return Login.LOOPBACK_ONLY
            return Login.ACCEPTED
    return Login.REFUSED
