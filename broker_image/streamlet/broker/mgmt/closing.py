"""Closing a connection on an operator's word (DELETE /api/connections/{name}): a RabbitMQ
Stream client is told why with a Close, as RabbitMQ's management close does, so it reports a
server close rather than a lost socket; the other protocols' connections are closed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...rabbitmq import Code
from ..rabbitmq.state import ConnectionState

if TYPE_CHECKING:
    from ..server import Client

DEFAULT_REASON = "Closed via management API"


def close(conn: Client, reason: str | None) -> None:
    if isinstance(conn, ConnectionState):
        conn.fail(Code.OK, reason or DEFAULT_REASON)
    else:
        conn.abort()
