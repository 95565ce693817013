"""Client processes: each runs one job on its own uvloop event loop.

The runner starts every process of a phase, waits until all of them are set up (connected,
publishers declared, latency consumers subscribed), then releases them together with one
event, so connection set-up is never timed. Times are ``time.monotonic()``, the same clock in
every process, so the runner can combine them.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import queue
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from typing import Any

from streamlet.broker.memory import settle_collector
from streamlet.client.connection import Connection
from streamlet.perf import stats
from streamlet.perf.consumer import CREDIT, PerfConsumer
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import OffsetType
from streamlet.storage.chunk import ChunkHeader

from . import failover, protoload
from .client import admin, connect, request
from .load import CountingConsumer, Publisher, RatePublisher


@dataclass
class Job:
    #: publish | consume | latency_pub | latency_sub | stalled | failover_pub, or one of
    #: protoload.JOBS (mega_produce | mega_consume | rsio_produce | rsio_consume)
    kind: str
    port: int
    streams: list[str]
    params: dict[str, Any] = field(default_factory=dict)


async def _wait_event(ev: Event, timeout: float) -> bool:
    return await asyncio.get_running_loop().run_in_executor(None, ev.wait, timeout)


#: (monotonic, process CPU seconds) when this process was released; one job per process
_released: list[float] = []


async def _go(go: Event) -> None:
    await _wait_event(go, 120)
    _released[:] = [time.monotonic(), time.process_time()]


async def _bounded(futs: list[asyncio.Future[None]], timeout: float) -> bool:
    """Wait for every future; False when the time ran out (the counts then tell how far)."""
    try:
        await asyncio.wait_for(asyncio.gather(*futs), timeout)
        return True
    except TimeoutError:
        return False


async def _declare_publisher(conn: Connection, pid: int, stream: str) -> None:
    # an empty reference means none; RabbitMQ 3.10 closes the connection on a null string
    await request(conn, lambda c: f.DeclarePublisher(c, pid, "", stream))


async def _subscribe(conn: Connection, sub_id: int, stream: str, offset_type: int,
                     credit: int) -> None:
    await request(conn, lambda c: f.Subscribe(c, sub_id, stream, offset_type, 0, credit, {}))


async def _publish(job: Job, conn: Connection, ready: Callable[[], None],
                   go: Event) -> dict[str, Any]:
    p = job.params
    pubs = []
    for i, stream in enumerate(job.streams):
        await _declare_publisher(conn, i, stream)
        pubs.append(Publisher(conn, i, stream, p["count"], p["size"], p.get("batch", 100),
                              p.get("window", 20_000)))
    ready()
    await _go(go)
    for pub in pubs:
        pub.start()
    ok = await _bounded([pub.done for pub in pubs], p.get("timeout", 600))
    return {
        "sent": sum(x.sent for x in pubs), "confirmed": sum(x.confirmed for x in pubs),
        "errors": sum(x.errored for x in pubs), "complete": ok,
        "t0": min(x.started for x in pubs),
        "t1": max(x.finished or time.monotonic() for x in pubs),
        "role_errors": [e for x in pubs for e in x.errors],
    }


async def _consume(job: Job, conn: Connection, ready: Callable[[], None],
                   go: Event) -> dict[str, Any]:
    p = job.params
    ready()
    await _go(go)
    subs = []
    t0 = time.monotonic()
    for i, stream in enumerate(job.streams):
        sink = CountingConsumer(conn, i, stream, p["count"], p.get("credit", 64))
        subs.append(sink)
        await _subscribe(conn, i, stream, OffsetType.FIRST, sink.initial_credit)
    ok = await _bounded([s.done for s in subs], p.get("timeout", 600))
    return {
        "records": sum(s.records for s in subs), "chunks": sum(s.chunks for s in subs),
        "data_bytes": sum(s.data_bytes for s in subs), "complete": ok, "t0": t0,
        "t1": max(s.finished or time.monotonic() for s in subs),
        "role_errors": [e for s in subs for e in s.errors],
    }


async def _latency_pub(job: Job, conn: Connection, ready: Callable[[], None],
                       go: Event) -> dict[str, Any]:
    p = job.params
    await _declare_publisher(conn, 0, job.streams[0])
    pub = RatePublisher(conn, 0, job.streams[0], p["rate"], p["duration"], p["size"])
    ready()
    await _go(go)
    t0 = time.monotonic()
    with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
        await asyncio.wait_for(pub.run(), p["duration"] + 60)
    return {"sent": pub.sent, "confirmed": pub.confirmed, "errors": pub.errored,
            "complete": pub.confirmed == pub.total, "t0": t0, "t1": time.monotonic(),
            "role_errors": list(pub.errors)}


class _Chunks(PerfConsumer):
    """perf's consumer, counting chunks too (the report's records per chunk)."""

    chunks = 0

    def _on_chunk(self, header: ChunkHeader, data: memoryview) -> None:
        self.chunks += 1
        super()._on_chunk(header, data)


async def _latency_sub(job: Job, conn: Connection, ready: Callable[[], None],
                       go: Event) -> dict[str, Any]:
    """perf's consumer: each record's send time against the clock on arrival (up to
    perf.consumer.SAMPLES records a chunk), into perf's histogram."""
    p = job.params
    expected = int(p["rate"] * p["duration"])
    sink = _Chunks(conn, 0, job.streams[0], max(p["size"], 8), 0, [0, 0], 0)
    conn.subscribers[0] = sink
    await _subscribe(conn, 0, job.streams[0], OffsetType.NEXT, CREDIT)
    ready()
    await _go(go)
    # the first part of the run is warm-up: its latencies are not kept
    sink.since_ns = time.time_ns() + int(p.get("warmup", 0) * 1e9)
    t0 = time.monotonic()
    deadline = t0 + p["duration"] + 60
    while sink.consumed < expected and sink.closed is None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    hist = sink.hist
    lat = stats.percentiles(hist, (0.5, 0.99), sink.max_us)
    nan = float("nan")
    return {
        "records": sink.consumed, "chunks": sink.chunks, "complete": sink.consumed >= expected,
        "t0": t0, "t1": time.monotonic(), "samples": stats.total(hist),
        "p50_ms": lat["p50"] if lat["p50"] is not None else nan,
        "p99_ms": lat["p99"] if lat["p99"] is not None else nan,
        "max_ms": lat["max"] if lat["max"] is not None else nan,
        "role_errors": [str(sink.closed)] if sink.closed is not None else [],
    }


async def _stalled(job: Job, conn: Connection, ready: Callable[[], None], go: Event,
                   stop: Event) -> dict[str, Any]:
    """Subscribe with credit, then never read the socket again until told to stop."""
    sink = CountingConsumer(conn, 0, job.streams[0], 1 << 62, job.params.get("credit", 64))
    sink.grant = False
    await _subscribe(conn, 0, job.streams[0], OffsetType.FIRST, sink.initial_credit)
    assert conn.transport is not None
    conn.transport.pause_reading()
    ready()
    await _go(go)
    await _wait_event(stop, job.params.get("timeout", 600))
    return {"records": sink.records, "chunks": sink.chunks, "complete": True}


async def _failover_pub(job: Job, ready: Callable[[], None], go: Event) -> dict[str, Any]:
    """A steady publisher that finds the new leader when its own dies (bench.failover)."""
    p = job.params
    got = await failover.attach_first(job.streams[0], job.port)
    ready()
    await _go(go)
    return await failover.run(job.streams[0], got, p["ports"], p["rate"], p["size"],
                              p["after"], time.monotonic() + p["timeout"])


def _client_cpu(res: dict[str, Any]) -> None:
    """This process's CPU from its release to the end of its load (one job per process)."""
    if _released:
        wall = time.monotonic() - _released[0]
        res["client_cpu_pct"] = 100 * (time.process_time() - _released[1]) / wall


async def _run(job: Job, ready: Callable[[], None], go: Event, stop: Event) -> dict[str, Any]:
    if job.kind == "failover_pub":  # opens (and reopens) its own connections
        return await _failover_pub(job, ready, go)
    if job.kind in protoload.JOBS:  # MEGA and RSIO: their own connections
        res = await protoload.JOBS[job.kind](job.port, job.streams[0], job.params, ready,
                                             lambda: _go(go))
        _client_cpu(res)
        return res
    conn, _ = await connect(job.port)
    try:
        if job.kind == "publish":
            res = await _publish(job, conn, ready, go)
        elif job.kind == "consume":
            res = await _consume(job, conn, ready, go)
        elif job.kind == "latency_pub":
            res = await _latency_pub(job, conn, ready, go)
        elif job.kind == "latency_sub":
            res = await _latency_sub(job, conn, ready, go)
        elif job.kind == "stalled":
            res = await _stalled(job, conn, ready, go, stop)
        else:
            raise ValueError(f"unknown job kind {job.kind}")
        _client_cpu(res)
        t = time.monotonic()
    finally:
        if job.kind == "stalled" and conn.transport is not None:
            conn.transport.close()
        else:
            await conn.close()
    res["server_errors"] = res.pop("role_errors", [])[:5]
    res["close_s"] = time.monotonic() - t
    return res


def _main(index: int, job: Job, results: mp.Queue[Any], go: Event, stop: Event) -> None:
    # The collector set as the broker sets it (broker.memory.settle_collector), for whichever
    # server is measured: with Python's default a catch-up consumer spent a sixth of its time
    # collecting (1,000,000 x 100 B: 18.8-20.4 M msg/s against 22.0-23.6 M so, five repeats
    # each, alternating), the bench's client, not the server, setting the rate.
    settle_collector()
    try:
        import uvloop

        run: Callable[..., Any] = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        run = asyncio.run
    try:
        res = run(_run(job, lambda: results.put(("ready", index, None)), go, stop))
        results.put(("result", index, res))
    except BaseException:
        results.put(("error", index, traceback.format_exc()))


class PhaseError(RuntimeError):
    pass


def run_parallel(jobs: list[Job], *, on_start: Callable[[], None] | None = None,
                 until: Callable[[list[dict[str, Any] | None]], bool] | None = None,
                 timeout: float = 900) -> list[dict[str, Any]]:
    """Run every job in its own process; release them together; return their results.

    ``on_start`` runs once all are ready, just before release. ``until``, if given, is polled
    with the results so far; when it returns True the stop event is set (stalled consumers
    wait for it)."""
    ctx = mp.get_context("spawn")
    results: mp.Queue[Any] = ctx.Queue()
    go, stop = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=_main, args=(i, job, results, go, stop), daemon=True)
             for i, job in enumerate(jobs)]
    for proc in procs:
        proc.start()
    out: list[dict[str, Any] | None] = [None] * len(jobs)
    ready = 0
    deadline = time.monotonic() + timeout
    try:
        while any(r is None for r in out):
            if until is not None and go.is_set() and until(out):
                stop.set()
            try:
                kind, index, value = results.get(timeout=0.05)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise PhaseError(f"phase did not finish in {timeout:.0f} s") from None
                if not all(p.is_alive() for p in procs) and results.empty():
                    dead = [i for i, p in enumerate(procs) if not p.is_alive() and out[i] is None]
                    if dead:
                        time.sleep(0.5)
                        if results.empty():
                            raise PhaseError(f"client process(es) {dead} died") from None
                continue
            if kind == "error":
                raise PhaseError(f"{jobs[index].kind} client failed:\n{value}")
            if kind == "ready":
                ready += 1
                if ready == len(jobs):
                    if on_start is not None:
                        on_start()
                    go.set()
            else:
                out[index] = value
    finally:
        stop.set()
        go.set()
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    return [r for r in out if r is not None]


def admin_sync(port: int, create: list[str] | None = None, delete: list[str] | None = None) -> None:
    asyncio.run(admin(port, create or [], delete or []))
