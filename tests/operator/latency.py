"""A TCP proxy on loopback that delays every byte by a fixed time each way, as a network would.

A test puts it between a client and a broker to tell apart code that waits for one round trip
per step from code that keeps the wire busy: however fast the machine, N sequential round
trips through it take at least N times twice the delay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from streamlet_operator.brokers import Address


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Forward what ``reader`` gets to ``writer``, each piece ``delay`` seconds after it came,
    in order (a piece never waits for the one before to be written: the delay does not add up)."""
    loop = asyncio.get_running_loop()
    due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            at, data = await due.get()
            if not data:
                break
            await asyncio.sleep(max(0.0, at - loop.time()))
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    try:
        while data := await reader.read(1 << 16):
            due.put_nowait((loop.time() + delay, data))
        due.put_nowait((loop.time() + delay, b""))
        await sender
    finally:
        sender.cancel()
        with contextlib.suppress(BaseException):
            await sender
        writer.close()


@contextlib.asynccontextmanager
async def delayed(target: Address, delay: float) -> AsyncIterator[Address]:
    """A proxy to ``target`` adding ``delay`` seconds each way; yields its address."""
    tasks: set[asyncio.Task[None]] = set()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        both = [asyncio.create_task(_pipe(client_r, server_w, delay)),
                asyncio.create_task(_pipe(server_r, client_w, delay))]
        tasks.update(both)
        try:
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in both:
                task.cancel()
                tasks.discard(task)
            server_w.close()
            client_w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        host, port = server.sockets[0].getsockname()[:2]
        yield host, port
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)
