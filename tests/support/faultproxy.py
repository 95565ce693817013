"""A TCP fault proxy on loopback for partition tests: it forwards 127.0.0.1:port to a target port
until it is cut (every connection through it aborted, new ones accepted and aborted at once, as
a peer behind a dropped link looks to its clients), and again once healed. ``rate`` (bytes a
second each way, None: as fast as it can) makes it a slow link.

The proxies (and whatever else the test runs in-process, such as a placement driver) live on a
``LoopThread``: an event loop of their own in a thread, so the test itself may block (RawPeer)
without stalling the traffic it inspects."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")
log = logging.getLogger("tests.faultproxy")
HOST = "127.0.0.1"


class FaultProxy:
    def __init__(self, target_port: int, host: str = HOST) -> None:
        self.host = host
        self.target_port = target_port
        self.port = 0  # set by start
        self.is_cut = False
        #: bytes a second each connection forwards each way (None: no limit); changeable
        self.rate: float | None = None
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accepted, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def cut(self) -> None:
        """Abort every connection through the proxy and refuse new ones until ``heal``."""
        self.is_cut = True
        for a, b in list(self._pairs):
            a.transport.abort()
            b.transport.abort()
        self._pairs.clear()

    def heal(self) -> None:
        self.is_cut = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut or self.target_port in (0, self.port):  # cut, or no target but itself
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        if self.is_cut:  # cut while connecting
            writer.transport.abort()
            up_writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pipe(src, dst, pair))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter]) -> None:
        try:
            while data := await src.read(1 << 16):
                dst.write(data)
                await dst.drain()
                if self.rate:
                    await asyncio.sleep(len(data) / self.rate)
        except (OSError, ConnectionError):
            pass
        finally:  # one side gone: so is the other (as a dropped link ends both)
            self._pairs.discard(pair)
            for w in pair:
                w.transport.abort()


class LoopThread:
    """An event loop running in a daemon thread; ``run`` a coroutine on it from the test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> LoopThread:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        with contextlib.suppress(RuntimeError):
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float = 60) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], _T], timeout: float = 60) -> _T:
        """``fn()`` on the loop's thread (what touches its transports must run there)."""
        async def call() -> _T:
            return fn()
        return self.run(call(), timeout)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


async def every(interval: float, step: Callable[[], Awaitable[object]]) -> None:
    """``step`` again and again, ``interval`` apart, until cancelled (a driver's loop)."""
    while True:
        try:
            await step()
        except Exception:  # as the driver's own loop: the next step tries again
            log.exception("step failed")
        await asyncio.sleep(interval)
