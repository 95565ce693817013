"""bench's RabbitMQ Stream connections are `streamlet perf`'s (streamlet/perf/wire.py): the project
client's Connection, with its handshake, heartbeats and the command quirks of older servers.

The load roles (bench/load.py) join the connection's ``publishers`` and ``subscribers`` tables as
perf's do, so a PublishConfirm costs one call per frame and a Deliver one call per chunk. This
module adds what the runner needs around them: requests whose refusal is a :class:`BenchError`,
and Credit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamlet.client import Client, StreamletError
from streamlet.client.connection import Connection
from streamlet.perf.wire import Target, open_connection
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Code

CREATED_OR_EXISTS = (Code.OK, Code.STREAM_ALREADY_EXISTS)


class BenchError(RuntimeError):
    pass


async def connect(port: int, host: str = "127.0.0.1", user: str = "guest",
                  password: str = "guest") -> tuple[Connection, Client]:
    """A logged-in connection (perf's) and its client; BenchError when it cannot be had."""
    try:
        return await open_connection(Target(host, port, user, password, "/"),
                                     name="streamlet-bench")
    except StreamletError as e:
        raise BenchError(f"connecting to port {port}: {e}") from None


async def request(conn: Connection, make: Callable[[int], f.Command],
                  accept: tuple[int, ...] = (Code.OK,)) -> Any:
    """The answer to ``make(correlation id)``; BenchError when its code is not in ``accept``."""
    try:
        return await conn.request(make(conn.next_correlation()), accept)
    except StreamletError as e:
        raise BenchError(str(e)) from None


def credit(conn: Connection, sub_id: int, chunks: int) -> None:
    conn.write(f.encode(f.Credit(sub_id, chunks)))


async def admin(port: int, create: list[str], delete: list[str]) -> None:
    """Delete then create streams through the broker on ``port``."""
    conn, client = await connect(port)
    try:
        for s in delete:
            await client.delete_stream(s, missing_ok=True)
        for s in create:
            await client.create_stream(s, exists_ok=True)
    finally:
        await conn.close()
