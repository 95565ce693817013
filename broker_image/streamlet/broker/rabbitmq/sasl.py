"""RabbitMQ's SASL mechanisms over the broker's users, as response codes: PLAIN
(``authzid NUL user NUL password``, checked by broker/auth.py, the rule every protocol shares)
and EXTERNAL (a verified client certificate's common name names a configured user; offered on
TLS connections only, broker/tls.py reads the name)."""

from __future__ import annotations

from ...rabbitmq import Code
from ..auth import Login, check
from ..config.model import User

PLAIN = "PLAIN"
EXTERNAL = "EXTERNAL"

_CODES = {Login.ACCEPTED: Code.OK, Login.REFUSED: Code.AUTHENTICATION_FAILURE,
          Login.LOOPBACK_ONLY: Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK}


def mechanisms(external: bool) -> list[str]:
    """The mechanisms offered: PLAIN, and EXTERNAL when the peer sent a verified certificate."""
    return [PLAIN, EXTERNAL] if external else [PLAIN]


def authenticate_plain(users: tuple[User, ...], data: bytes | None, peer: str | None) -> tuple[Code, str | None]:
    """Check ``authzid NUL user NUL password``; return the response code and the user name."""
    parts = (data or b"").split(b"\x00")
    if len(parts) != 3:
        return Code.SASL_ERROR, None
    try:
        name, password = parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        return Code.SASL_ERROR, None
    code = _CODES[check(users, name, password, peer)]
    return code, (name if code == Code.OK else None)


def authenticate_external(users: tuple[User, ...], common_name: str | None) -> tuple[Code, str | None]:
    """The certificate's common name as the user, when it names a configured one."""
    if common_name is not None and any(u.name == common_name for u in users):
        return Code.OK, common_name
    return Code.AUTHENTICATION_FAILURE, None
