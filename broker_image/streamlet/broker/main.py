"""Running a broker: its listeners (every protocol of protocols.py, metrics, the management
API), and the process's life until a signal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal

from ..dirlock import DirectoryLock
from ..native import ENV as NO_C
from ..native import missing_line, survey
from ..storage.files import files
from .config.model import BrokerConfig
from .memory import keep_large_blocks, settle_collector
from .metrics import start_metrics
from .mgmt import start_management
from .protocols import LISTENERS
from .reload import Reloader, fingerprints
from .server import Broker

log = logging.getLogger("streamlet.broker")

def use_all_descriptors(max_open_files: int) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one (the kernel's default soft limit, 1024, is
    a guard for select(), which asyncio does not use) and size the file cache of read
    segments to ``max_open_files``, at most half of it (streams and connections need the
    rest). Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            log.warning("cannot raise RLIMIT_NOFILE from %d to %d: %s", soft, hard, e)
    cache = max_open_files
    if soft != resource.RLIM_INFINITY and cache > soft // 2:
        cache = max(soft // 2, 1)
        log.warning("storage.max_open_files %d is more than half of RLIMIT_NOFILE (%d): "
                    "keeping %d segment files open", max_open_files, soft, cache)
    files.set_limit(cache)
    return soft


async def serve(config: BrokerConfig, ready: asyncio.Event | None = None) -> None:
    """Run a broker until SIGINT or SIGTERM; SIGHUP reloads the users file and the TLS
    certificate (reload.py), as their change does within [server] reload_interval."""
    use_all_descriptors(config.max_open_files)  # the process's, before the streams open
    missing = missing_line(survey(), os.environ.get(NO_C))  # one line, only when some are
    if missing is not None:
        log.warning("%s", missing)
    seen = fingerprints(config)  # before the streams load: a change meanwhile is reloaded
    # Before anything listens: a SIGTERM once the first client is served stops the broker
    # cleanly (GOAWAY, flush) and a SIGHUP is kept for the reloader, never the default
    # actions' instant death while the metrics and HTTP listeners start.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    hangups: list[None] = []
    with contextlib.suppress(NotImplementedError):
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, hangups.append, None)
    broker = Broker(config, LISTENERS)
    metrics = management = None

    async def close() -> None:
        for server in (metrics, management):
            if server is not None:
                await server.close()
        await broker.stop()

    try:
        metrics = await start_metrics(broker)  # [listeners.metrics]: /metrics on this loop
        management = await start_management(broker)  # [listeners.http]: /api/ on this loop
        await broker.start()  # the stream ports last: once they answer, /metrics and /api/ do
    except OSError:
        await close()
        raise
    reloader = Reloader(broker, seen)
    reloading = asyncio.create_task(reloader.run())
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, reloader.hangup)
    if hangups:  # a SIGHUP while starting
        reloader.hangup()
    settle_collector()
    if ready is not None:
        ready.set()
    await stop.wait()
    reloading.cancel()
    await close()


#: held while a broker serves from a data directory: a second broker there would share its
#: streams' files
LOCK_FILE = "broker.lock"


def run(config: BrokerConfig) -> None:
    """Serve on uvloop when it is installed, else on asyncio's own loop; raise AlreadyRunning
    when another broker serves from the same data directory."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    keep_large_blocks()
    lock = DirectoryLock(config.data_dir / LOCK_FILE)
    lock.acquire()
    try:
        try:
            import uvloop
        except ImportError:
            asyncio.run(serve(config))
        else:
            uvloop.run(serve(config))
    finally:
        lock.release()
