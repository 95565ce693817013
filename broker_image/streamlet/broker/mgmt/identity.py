"""Who a request comes from: HTTP Basic against the broker's users, and what that user may see.

The broker's users have no RabbitMQ tags; what they may do follows from [[permissions]] (as
broker/access.py reads them): a user with no [[permissions]] entry has every right on every
virtual host, so the API treats it as RabbitMQ's ``administrator`` (it sees and may close every
connection); a user with entries is a ``management`` user: it sees the virtual hosts it has an
entry for, the streams there it has a permission on, and its own connections, publishers and
consumers (RabbitMQ's rule for users without the ``monitoring`` tag).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from ..access import AccessControl
from ..auth import Login, check
from ..config.model import BrokerConfig

ADMINISTRATOR = "administrator"
MANAGEMENT = "management"


@dataclass(frozen=True)
class Identity:
    name: str
    administrator: bool

    @property
    def tags(self) -> list[str]:
        return [ADMINISTRATOR if self.administrator else MANAGEMENT]


@dataclass(frozen=True)
class Refused:
    """Why a request is not authenticated (answered 401)."""

    reason: str


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """``Basic base64(user:password)``, or None when absent or malformed."""
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def authenticate(config: BrokerConfig, header: str | None, peer: str | None) -> Identity | Refused:
    credentials = basic_credentials(header)
    if credentials is None:
        return Refused("Not_Authorized")
    name, password = credentials
    login = check(config.users, name, password, peer)
    if login is Login.LOOPBACK_ONLY:
        return Refused("User can only log in via localhost")
    if login is Login.REFUSED:
        return Refused("Login failed")
    restricted = any(p.user == name for p in config.permissions)
    return Identity(name, administrator=not restricted)


class Visibility:
    """What ``who`` may see, by the broker's permissions."""

    def __init__(self, who: Identity, access: AccessControl) -> None:
        self.who = who
        self.access = access

    def vhost(self, vhost: str) -> bool:
        return self.who.administrator or self.access.vhost_allowed(self.who.name, vhost)

    def stream(self, vhost: str, name: str) -> bool:
        """A stream it has any permission on (configure, write or read)."""
        return self.who.administrator or any(
            self.access.allowed(self.who.name, vhost, kind, name)
            for kind in ("configure", "write", "read"))

    def configure(self, vhost: str, name: str) -> bool:
        """May declare or delete the stream ``name`` (RabbitMQ's configure permission)."""
        return self.who.administrator or self.access.allowed(self.who.name, vhost, "configure",
                                                             name)

    def owner(self, user: str | None) -> bool:
        """A connection (and its publishers and consumers) it may see and close."""
        return self.who.administrator or user == self.who.name
