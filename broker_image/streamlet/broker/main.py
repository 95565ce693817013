"""Running a broker: the protocols it listens for, and the process's life until a signal.

``LISTENERS`` is the table of protocol adapters: a further protocol is one adapter module and
one entry here (with its own config section when it lands).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping

from .config import BrokerConfig
from .connection import Connection
from .server import Broker, ConnectionFactory

LISTENERS: Mapping[str, ConnectionFactory] = {
    "rabbitmq": lambda broker, tls: Connection(broker, tls=tls),
}


async def serve(config: BrokerConfig, ready: asyncio.Event | None = None) -> None:
    """Run a broker until SIGINT or SIGTERM."""
    broker = Broker(config, LISTENERS)
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
