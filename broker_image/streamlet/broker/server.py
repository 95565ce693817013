"""The broker process: listeners, the streams, and a clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from .access import AccessControl
from .config import BrokerConfig
from .connection import Connection
from .directory import EMPTY, Directory, DirectoryFile
from .streams import Stream
from .tls import server_context
from .vhosts import VirtualHost

log = logging.getLogger("streamlet.broker")

RETENTION_INTERVAL_S = 60.0


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.vhosts = {name: VirtualHost(name, config.data_dir, config.fsync) for name in config.vhosts}
        self.streams = self.vhosts["/"].streams  # the default vhost's
        self.access = AccessControl(config)
        self.connections: set[Connection] = set()
        self.ssl_context = server_context(config.tls) if config.tls is not None else None
        self._servers: list[asyncio.Server] = []
        self._retention_task: asyncio.Task[None] | None = None
        self._directory = DirectoryFile(config.directory_file) if config.directory_file else None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Connection(self), self.config.host, self.config.port, reuse_address=True,
            backlog=1024,
        )
        self._servers.append(server)
        if self.ssl_context is not None and self.config.tls is not None:
            tls_server = await loop.create_server(
                lambda: Connection(self, tls=True), self.config.host, self.config.tls.port,
                ssl=self.ssl_context, reuse_address=True, backlog=1024,
            )
            self._servers.append(tls_server)
        self._retention_task = asyncio.create_task(self._retention_loop())
        for sock in server.sockets:
            log.info("streamlet listening on %s", sock.getsockname()[:2])

    @property
    def ports(self) -> list[int]:
        return [s.getsockname()[1] for srv in self._servers for s in srv.sockets]

    def delete_stream(self, vhost: VirtualHost, name: str) -> bool:
        stream = vhost.streams.delete(name)
        if stream is None:
            return False
        vhost.superstreams.forget_partition(name)
        self.stream_gone(stream)
        return True

    def stream_gone(self, stream: Stream) -> None:
        """Tell every connection that held ``stream`` (MetadataUpdate) and drop what it held."""
        for conn in stream.holders():
            conn.forget_stream(stream)

    def directory(self) -> Directory:
        """Where the streams other brokers hold live (empty without [cluster] directory_file)."""
        return self._directory.current() if self._directory is not None else EMPTY

    def user_connections(self, user: str) -> int:
        return sum(1 for c in self.connections if c.user == user)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(RETENTION_INTERVAL_S)
            try:
                for vhost in self.vhosts.values():
                    vhost.streams.apply_retention()
            except OSError as e:
                log.error("retention failed: %s", e)

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        if self._retention_task:
            self._retention_task.cancel()
        for conn in list(self.connections):
            conn.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        for vhost in self.vhosts.values():
            vhost.close()
        log.info("streamlet stopped")


async def serve(config: BrokerConfig, ready: asyncio.Event | None = None) -> None:
    """Run a broker until SIGINT or SIGTERM."""
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
    await broker.stop()


def run(config: BrokerConfig) -> None:
    """Serve on uvloop when it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(config))
    else:
        uvloop.run(serve(config))
