"""SASL PLAIN against the configured users; loopback-only users as RabbitMQ's guest."""

from __future__ import annotations

import hmac

from ..rabbitmq import Code
from .config import User, loopback_address

MECHANISMS = ["PLAIN"]


def is_loopback(address: str | None) -> bool:
    """Whether a peer connected from this machine: its address is a loopback one (an
    IPv4-mapped one too, as a dual-stack listener sees IPv4 peers)."""
    if not address:
        return True  # a Unix socket or a socketpair: local by construction
    return loopback_address(address)


def authenticate_plain(users: tuple[User, ...], data: bytes | None, peer: str | None) -> tuple[Code, str | None]:
    """Check ``authzid NUL user NUL password``; return the response code and the user name."""
    parts = (data or b"").split(b"\x00")
    if len(parts) != 3:
        return Code.SASL_ERROR, None
    try:
        name, password = parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        return Code.SASL_ERROR, None
    for user in users:
        if user.name == name and hmac.compare_digest(user.password.encode(), password.encode()):
            if user.loopback_only and not is_loopback(peer):
                return Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK, None
            return Code.OK, name
    return Code.AUTHENTICATION_FAILURE, None
