"""A worker process: its producers or consumers on one event loop, each on its own connection.

The command shares with it: ``counters`` (a RawArray the roles write their counts into, read by
the command every 100 ms), three events (go: start publishing; stop: stop publishing; finish:
report and exit) and a queue for what is not a count: ready, errors, latency histograms."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass
from functools import partial
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from ..client import StreamletError
from ..rabbitmq import OffsetType, frames
from .consumer import CREDIT, PerfConsumer
from .plan import Role
from .producer import PerfProducer
from .wire import Target, open_connection, open_on_leader

#: seconds between the histograms a worker sends
SHIP_S = 0.25
#: seconds between looks at the command's events (publishing stops within this)
TICK_S = 0.01
#: counters a role owns in the shared array
SLOTS = 4


@dataclass
class Spec:
    name: str
    roles: list[Role]
    target: Target
    size: int
    batch: int
    window: int
    offset: str  # first | last | next
    since_ns: int  # the run's start: later send times are this run's messages
    producers: int  # how many in the whole run (consumers' slots come after theirs)
    counters: Any  # multiprocessing RawArray('q')
    go: Event
    stop: Event
    finish: Event
    queue: Queue[tuple[Any, ...]]


def slot(role: Role, producers: int) -> int:
    """Where a role's counters start in the shared array."""
    return SLOTS * (role.index if role.kind == "producer" else producers + role.index)


def main(spec: Spec) -> None:
    """The process's entry: signals are the command's to handle (it tells us to finish)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        asyncio.run(_work(spec))
    else:
        uvloop.run(_work(spec))


def _one_line(e: BaseException) -> str:
    if isinstance(e, StreamletError | OSError | TimeoutError):
        return str(e) or type(e).__name__
    return f"{type(e).__name__}: {e}"


async def _work(spec: Spec) -> None:
    parent = os.getppid()
    conns: list[Any] = []
    producers: list[PerfProducer] = []
    consumers: list[PerfConsumer] = []
    try:
        for role in spec.roles:
            name = f"perf-{role.kind}-{role.index + 1}"
            if role.kind == "producer":
                conn, client = await open_on_leader(spec.target, role.stream, name)
                conns.append(conn)
                p = PerfProducer(conn, 0, role.stream, spec.size, spec.batch, spec.window,
                                 role.rate, spec.counters, slot(role, spec.producers))
                conn.publishers[0] = p
                # no reference: an empty string (RabbitMQ 3.10 closes on a null one)
                await client.request(partial(frames.DeclarePublisher, publisher_id=0,
                                             reference="", stream=role.stream))
                producers.append(p)
            else:
                conn, client = await open_connection(spec.target, name=name)
                conns.append(conn)
                c = PerfConsumer(conn, 0, role.stream, spec.size, spec.since_ns, spec.counters,
                                 slot(role, spec.producers))
                conn.subscribers[0] = c
                await client.request(partial(
                    frames.Subscribe, subscription_id=0, stream=role.stream,
                    offset_type=_OFFSETS[spec.offset], offset=0, credit=CREDIT, properties={}))
                consumers.append(c)
    except Exception as e:
        spec.queue.put(("error", spec.name, _one_line(e)))
        await _close(conns)
        return
    spec.queue.put(("ready", spec.name))
    while not spec.go.is_set() and not spec.finish.is_set():
        await asyncio.sleep(0.002)
    tasks = [asyncio.ensure_future(p.run()) for p in producers]
    stopped = False
    lost: set[int] = set()
    shipped = time.monotonic()
    while not spec.finish.is_set():
        await asyncio.sleep(TICK_S)
        if spec.stop.is_set() and not stopped:
            stopped = True
            for p in producers:
                p.stop()
        if time.monotonic() - shipped < SHIP_S:
            continue
        shipped = time.monotonic()
        if os.getppid() != parent:  # the command is gone: nobody will read our figures
            break
        _ship(spec, producers, consumers)
        roles: list[PerfProducer | PerfConsumer] = [*producers, *consumers]
        for r in roles:
            if r.closed is not None and id(r) not in lost:
                lost.add(id(r))
                spec.queue.put(("lost", spec.name, f"{r.stream}: {r.closed}"))
    for p in producers:
        p.stop()
    for t in tasks:
        t.cancel()
    _ship(spec, producers, consumers)
    spec.queue.put(("done", spec.name))
    await _close(conns)


def _ship(spec: Spec, producers: list[PerfProducer], consumers: list[PerfConsumer]) -> None:
    """Send the histograms filled since the last time (and the maxima so far)."""
    for kind, roles in (("confirm", producers), ("consume", consumers)):
        hist: dict[int, int] = {}
        top = 0
        for r in roles:
            for b, n in r.hist.items():
                hist[b] = hist.get(b, 0) + n
            r.hist = {}
            top = max(top, r.max_us)
        if hist:
            spec.queue.put(("hist", kind, hist, top, time.monotonic()))


async def _close(conns: list[Any]) -> None:
    for conn in conns:
        with contextlib.suppress(Exception):
            await conn.close(timeout=2.0)


_OFFSETS = {"first": OffsetType.FIRST, "last": OffsetType.LAST, "next": OffsetType.NEXT}
