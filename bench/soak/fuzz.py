"""Phase 1: at least N mutated frames per protocol over many short connections, from a few
worker processes, while a bystander publishes and consumes beside them. The broker may answer
or close each connection as it likes; it must never crash, never refuse a connection, and the
bystander must never notice."""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

from .bystander import Bystander
from .common import MB, Broker, PhaseResult, RssSampler, settle_rss
from .fuzz_stream import StreamFuzzer
from .peer import Peer, PeerClosed, fresh_handshake


class ProtocolFuzzer(Protocol):
    """What the driver needs from a protocol: its real handshake, and the frames of one
    connection. A new protocol (Kafka, AMQP...) adds a module and an entry in FUZZERS."""

    name: str

    async def handshake(self, peer: Peer) -> None: ...

    def session(self, rng: random.Random, opened: bool, count: int,
                mutation_rate: float) -> tuple[list[bytes], int]: ...


FUZZERS: dict[str, type[ProtocolFuzzer]] = {"stream": StreamFuzzer}

CONCURRENCY = 48                 # connections in flight per worker process
IDLE_S = 0.25                    # a connection is done once the broker has been silent this long
MUTATION_RATES = (0.0, 0.02, 0.1, 0.3, 1.0)   # per connection: how much of it is broken


@dataclass
class WorkerStats:
    frames: int = 0              # frames written to a socket (handshakes not counted)
    frames_mutated: int = 0
    connections: int = 0
    handshaken: int = 0          # connections that did a real handshake first
    closed_by_broker: int = 0    # the broker closed (EOF or reset) before we did
    answered: int = 0            # connections that got at least one byte back
    bytes_received: int = 0
    bytes_sent: int = 0
    failures: list[str] = field(default_factory=list)   # connects or handshakes that failed


async def _one_connection(fuzzer: ProtocolFuzzer, port: int, rng: random.Random, s: WorkerStats) -> None:
    try:
        peer = await Peer.connect(port, timeout=60)
    except OSError as e:
        s.failures.append(f"connect: {type(e).__name__}: {e}")
        return
    s.connections += 1
    try:
        opened = rng.random() < 0.6
        if opened:
            try:
                await fuzzer.handshake(peer)
            except (PeerClosed, TimeoutError, OSError) as e:
                s.failures.append(f"handshake: {type(e).__name__}: {e}")
                return
            s.handshaken += 1
        rate = rng.choice(MUTATION_RATES)
        frames, mutated = fuzzer.session(rng, opened, rng.randint(10, 80), rate)
        data = b"".join(frames)
        # Written in a few random pieces: frames cut across reads, as TCP may deliver them.
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 3))))
        try:
            for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
                peer.send_raw(data[a:b])
                await peer.writer.drain()
        except OSError:
            s.closed_by_broker += 1  # closed while we wrote: the frames before were taken
            return
        s.frames += len(frames)
        s.bytes_sent += len(data)
        s.frames_mutated += mutated
        got = 0
        while True:
            try:
                chunk = await asyncio.wait_for(peer.reader.read(65536), IDLE_S)
            except TimeoutError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                s.closed_by_broker += 1
                break
            got += len(chunk)
        s.bytes_received += got
        s.answered += got > 0
    finally:
        if rng.random() < 0.5:
            peer.abort()
        else:
            await peer.close()


async def _worker_async(protocol: str, port: int, quota: int, seed: int, max_seconds: float) -> WorkerStats:
    fuzzer = FUZZERS[protocol]()
    stats = WorkerStats()
    rng = random.Random(seed)
    deadline = time.monotonic() + max_seconds

    async def loop(i: int) -> None:
        r = random.Random(rng.getrandbits(64))
        while stats.frames < quota and time.monotonic() < deadline and len(stats.failures) < 20:
            await _one_connection(fuzzer, port, r, stats)

    await asyncio.gather(*(loop(i) for i in range(CONCURRENCY)))
    return stats


def worker(protocol: str, port: int, quota: int, seed: int, max_seconds: float) -> dict[str, object]:
    """One worker process's run (a plain function: it crosses a process boundary)."""
    return asdict(asyncio.run(_worker_async(protocol, port, quota, seed, max_seconds)))


async def run(broker: Broker, frames: int, workers: int, max_seconds: float, seed: int,
              protocols: tuple[str, ...] = ("stream",)) -> PhaseResult:
    res = PhaseResult("fuzz")
    t0 = time.monotonic()
    res.rss_start = broker.rss()
    bystander = Bystander(broker.port, "soak-bystander-fuzz")
    await bystander.start()
    loop = asyncio.get_running_loop()
    totals = WorkerStats()
    with RssSampler(broker) as sampler, concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for protocol in protocols:
            quota, before = -(-frames // workers), totals.frames
            jobs = [loop.run_in_executor(pool, worker, protocol, broker.port, quota, seed + i, max_seconds)
                    for i in range(workers)]
            for out in await asyncio.gather(*jobs):
                part = WorkerStats(**out)  # type: ignore[arg-type]
                for k in ("frames", "frames_mutated", "connections", "handshaken",
                          "closed_by_broker", "answered", "bytes_received", "bytes_sent"):
                    setattr(totals, k, getattr(totals, k) + getattr(part, k))
                totals.failures += part.failures
            sent = res.figures[f"frames_{protocol}"] = totals.frames - before
            if sent < frames:
                res.fail(f"{protocol}: only {sent:,} of {frames:,} frames sent within {max_seconds:.0f} s")
    res.rss_peak = sampler.peak
    report = await bystander.stop()
    res.figures.update(
        frames=totals.frames, frames_mutated=totals.frames_mutated, connections=totals.connections,
        handshaken=totals.handshaken, closed_by_broker=totals.closed_by_broker,
        answered=totals.answered, sent_mb=round(totals.bytes_sent / MB, 1),
        received_mb=round(totals.bytes_received / MB, 1),
        bystander_msgs=report.consumed, bystander_slowest_flush_s=round(report.slowest_flush_s, 2),
        # streams the fuzz created (bit flips in a pool name make new ones), a cost in RSS and fds
        streams_left=sum(1 for d in (broker.data_dir / "streams").iterdir()
                         if not d.name.startswith("soak-")),
        broker_fds=broker.fds())
    if totals.failures:
        res.fail(f"{len(totals.failures)} connects/handshakes failed, first: {totals.failures[0]}")
    for e in report.errors:
        res.fail(f"bystander: {e}")
    if not broker.alive():
        res.fail(f"broker {broker.exit_status()}; log tail:\n{broker.log_tail()}")
    else:
        try:
            await fresh_handshake(broker.port)
        except (OSError, PeerClosed, TimeoutError) as e:
            res.fail(f"a fresh handshake after the fuzz failed: {type(e).__name__}: {e}")
    res.rss_end, settle = await settle_rss(broker, res.rss_start)
    res.check_rss(settle)
    res.seconds = time.monotonic() - t0
    return res
