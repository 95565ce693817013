"""Connections for the workers: the project client's :class:`Connection` (handshake, TLS,
SASL, heartbeats, the 3.10 command quirks), whose ``publishers`` and ``subscribers`` tables
the perf roles join directly, so that their hot paths cost a call per frame or chunk."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path

from ..client import Client
from ..client.connection import Connection
from ..client.tls import client_context


@dataclass(frozen=True)
class Target:
    """Where and as whom to connect (picklable: it goes to the worker processes)."""

    host: str
    port: int
    user: str
    password: str
    vhost: str
    tls: bool = False
    ca_cert: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    mechanism: str = "PLAIN"

    def ssl_context(self) -> ssl.SSLContext | None:
        return client_context(self.ca_cert, self.cert, self.key) if self.tls else None


async def open_connection(target: Target, host: str | None = None, port: int | None = None,
                          name: str | None = None,
                          timeout: float = 30.0) -> tuple[Connection, Client]:
    """A logged-in connection to ``target`` (or to ``host``:``port`` with its credentials)."""
    loop = asyncio.get_running_loop()
    host = host or target.host
    ctx = target.ssl_context()
    async with asyncio.timeout(timeout):
        _, conn = await loop.create_connection(
            lambda: Connection(loop, timeout), host, port or target.port, ssl=ctx,
            server_hostname=host if ctx is not None else None)
    try:
        await conn.open(user=target.user, password=target.password, vhost=target.vhost,
                        heartbeat=60, frame_max=1048576, connection_name=name,
                        mechanism=target.mechanism)
    except BaseException:
        if conn.transport is not None:
            conn.transport.abort()
        raise
    return conn, Client(conn)


async def open_on_leader(target: Target, stream: str,
                         name: str | None = None) -> tuple[Connection, Client]:
    """A connection to the broker that leads ``stream`` (publishers must write there): the
    seed's own when it leads, else a second one to the leader it names."""
    conn, client = await open_connection(target, name=name)
    leader = await client.leader(stream)
    if leader is None or client.is_local(leader):
        return conn, client
    await client.close()
    return await open_connection(target, leader[0], leader[1], name=name)
