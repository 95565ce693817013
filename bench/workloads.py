"""The benchmark workloads, each run the same way against any server.

Every workload creates its own streams, runs its client processes through
:func:`bench.workers.run_parallel` while a thread samples the broker's RSS, deletes its streams,
and returns :class:`Row` values with exact counts (what was sent, confirmed, consumed).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .servers import Server
from .workers import Job, admin_sync, run_parallel

MB = 1e6


@dataclass
class Sizes:
    small: int = 100
    large: int = 1000
    pub_small: int = 1_000_000
    pub_large: int = 200_000
    fan_streams: int = 10
    fan_count: int = 100_000  # per stream
    lat_rate: int = 10_000
    lat_seconds: float = 10.0
    lat_warmup: float = 1.0
    many_streams: int = 100
    many_total: int = 1_000_000
    stall_count: int = 200_000  # of `large` messages
    stall_hold: float = 2.0  # keep sampling this long after the publisher finished
    consume_reps: int = 3  # catch-up reads of each published stream (short phases are noisy)
    physical_bytes: int = 1 << 30
    pub_procs: int = 1  # publisher processes sharing one stream in the single-stream workloads
    fail_kill_after: float = 3.0  # replicated failover: publish this long, then kill the leader
    fail_after: float = 2.0  # and keep publishing this long after the first new confirm
    catchup_bytes: int = 1_000_000_000  # published while a member is stopped (replicated)
    add_bytes: int = 1_000_000_000  # in the stream a member is added to (add-member)
    proto_count: int = 100_000  # of `small` messages, per protocol (protocols)
    #: bytes SBP and its RabbitMQ-protocol baseline move at each size (protocols): 100,000
    #: messages take the RabbitMQ consumer 10-50 ms, too short for a rate
    sbp_bytes: int = 500_000_000

    @classmethod
    def quick(cls) -> Sizes:
        return cls(pub_small=20_000, pub_large=5_000, fan_count=2_000, lat_seconds=1.0,
                   lat_warmup=0.2, many_total=10_000, stall_count=5_000, stall_hold=0.5,
                   consume_reps=1, physical_bytes=64 << 20, fail_kill_after=1.0,
                   fail_after=0.5, catchup_bytes=20_000_000, add_bytes=20_000_000,
                   proto_count=5_000,
                   sbp_bytes=500_000)


@dataclass
class Row:
    workload: str  # stable key, e.g. "publish-100"
    label: str
    server: str
    size: int
    expected: int  # messages that should have been moved
    sent: int = 0
    confirmed: int = 0
    consumed: int = 0
    errors: int = 0
    seconds: float = 0.0
    chunks: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    rss_peak_mb: float = 0.0
    rss_end_mb: float = 0.0
    #: broker CPU over the timed window (100 = one core), and the busiest client process's
    broker_cpu_pct: float | None = None
    client_cpu_pct: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: which count the row is about: "confirmed" (publish rows) or "consumed"
    measures: str = "confirmed"

    @property
    def moved(self) -> int:
        return self.confirmed if self.measures == "confirmed" else self.consumed

    @property
    def msg_s(self) -> float:
        return self.moved / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_s(self) -> float:
        return self.msg_s * self.size / MB

    @property
    def records_per_chunk(self) -> float | None:
        return self.consumed / self.chunks if self.chunks else None

    @property
    def exact(self) -> bool:
        """Every message the row is about was published, confirmed and (if read) consumed."""
        ok = self.errors == 0 and self.moved == self.expected
        if self.measures == "confirmed":
            ok = ok and self.sent == self.expected
        return ok

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.update(msg_s=self.msg_s, mb_s=self.mb_s, records_per_chunk=self.records_per_chunk,
                 exact=self.exact)
        return d


class RssSampler:
    """Samples the broker's RSS and CPU time every ``interval`` seconds in a thread."""

    def __init__(self, server: Server, interval: float = 0.05) -> None:
        self.server, self.interval = server, interval
        self.samples: list[tuple[float, int]] = []
        self.cpu: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            self.samples.append((now, self.server.rss()))
            self.cpu.append((now, self.server.cpu()))
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic(), self.server.rss()))

    def cpu_pct(self, t0: float, t1: float) -> float | None:
        """Broker CPU between two instants, from the samples nearest to them."""
        if len(self.cpu) < 2 or t1 <= t0:
            return None
        a = min(self.cpu, key=lambda s: abs(s[0] - t0))
        b = min(self.cpu, key=lambda s: abs(s[0] - t1))
        return 100 * (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else None

    @property
    def peak_mb(self) -> float:
        return max((s for _, s in self.samples), default=0) / MB

    @property
    def last_mb(self) -> float:
        return self.samples[-1][1] / MB if self.samples else 0.0


def _phase(server: Server, jobs: list[Job], **kw: Any) -> tuple[list[dict[str, Any]], RssSampler]:
    # What earlier phases wrote goes to disk first: else a phase pays for the writeback of the
    # phases before it (the kernel throttles writers past its dirty limits), and the rows of a
    # run favour whichever protocol or server went first.
    os.sync()
    sampler = RssSampler(server)
    try:
        results = run_parallel(jobs, on_start=sampler.start, **kw)
    finally:
        if sampler._thread.is_alive():
            sampler.stop()
    return results, sampler


def _span(results: list[dict[str, Any]]) -> float:
    return max(r["t1"] for r in results) - min(r["t0"] for r in results)


def _split(items: list[str], parts: int) -> list[list[str]]:
    parts = max(1, min(parts, len(items)))
    return [items[i::parts] for i in range(parts)]


def _cpu(row: Row, results: list[dict[str, Any]], sampler: RssSampler) -> Row:
    row.broker_cpu_pct = sampler.cpu_pct(min(r["t0"] for r in results),
                                         max(r["t1"] for r in results))
    row.client_cpu_pct = max((r.get("client_cpu_pct", 0.0) for r in results), default=None)
    return row


def _errors(results: list[dict[str, Any]]) -> list[str]:
    return [e for r in results for e in r.get("server_errors", [])]


def _publish_row(key: str, label: str, server: Server, size: int, expected: int,
                 results: list[dict[str, Any]], sampler: RssSampler) -> Row:
    return _cpu(Row(key, label, server.name, size, expected,
               sent=sum(r["sent"] for r in results),
               confirmed=sum(r["confirmed"] for r in results),
               errors=sum(r["errors"] for r in results), seconds=_span(results),
               rss_peak_mb=sampler.peak_mb, rss_end_mb=sampler.last_mb,
               extra={"server_errors": _errors(results)}), results, sampler)


def _consume_row(key: str, label: str, server: Server, size: int, expected: int,
                 results: list[dict[str, Any]], sampler: RssSampler) -> Row:
    return _cpu(Row(key, label, server.name, size, expected,
               consumed=sum(r["records"] for r in results),
               chunks=sum(r["chunks"] for r in results), seconds=_span(results),
               rss_peak_mb=sampler.peak_mb, rss_end_mb=sampler.last_mb, measures="consumed",
               extra={"server_errors": _errors(results)}), results, sampler)


def publish_then_consume(server: Server, sz: Sizes, size: int, count: int) -> list[Row]:
    stream = f"bench-pc-{size}"
    admin_sync(server.port, create=[stream], delete=[stream])
    try:
        procs = max(1, sz.pub_procs)
        per = count // procs
        jobs = [Job("publish", server.port, [stream], {"count": per, "size": size})
                for _ in range(procs)]
        results, sampler = _phase(server, jobs)
        label = f"{count:,} x {size} B"
        pub = _publish_row(f"publish-{size}", f"publish {label}", server, size, per * procs,
                           results, sampler)
        reads = []
        for _ in range(max(1, sz.consume_reps)):
            results, sampler = _phase(server, [Job("consume", server.port, [stream],
                                                   {"count": per * procs})])
            reads.append(_consume_row(f"consume-{size}", f"catch-up consume {label}", server,
                                      size, per * procs, results, sampler))
        # the median read; every read must have been exact
        con = sorted(reads, key=lambda r: r.msg_s)[len(reads) // 2]
        con.extra["reads_msg_s"] = [r.msg_s for r in reads]
        if not all(r.exact for r in reads):
            con.errors += 1
        return [pub, con]
    finally:
        admin_sync(server.port, delete=[stream])


def fan(server: Server, sz: Sizes, procs: int = 2) -> list[Row]:
    """N publishers and N consumers on N streams at once (consumers read live, from first)."""
    streams = [f"bench-fan-{i}" for i in range(sz.fan_streams)]
    admin_sync(server.port, create=streams, delete=streams)
    try:
        params = {"count": sz.fan_count, "size": sz.small}
        jobs = [Job("publish", server.port, part, params) for part in _split(streams, procs)]
        jobs += [Job("consume", server.port, part, params) for part in _split(streams, procs)]
        results, sampler = _phase(server, jobs)
        pubs = [r for r in results if "sent" in r]
        cons = [r for r in results if "records" in r]
        total = sz.fan_count * sz.fan_streams
        n = sz.fan_streams
        label = f"{n} publishers + {n} consumers, {n} streams x {sz.fan_count:,} x {sz.small} B"
        return [
            _publish_row("fan-publish", f"{label}: publish", server, sz.small, total, pubs,
                         sampler),
            _consume_row("fan-consume", f"{label}: consume", server, sz.small, total, cons,
                         sampler),
        ]
    finally:
        admin_sync(server.port, delete=streams)


def latency(server: Server, sz: Sizes) -> list[Row]:
    stream = "bench-latency"
    admin_sync(server.port, create=[stream], delete=[stream])
    try:
        params = {"rate": sz.lat_rate, "duration": sz.lat_seconds, "size": sz.small,
                  "warmup": sz.lat_warmup}
        jobs = [Job("latency_sub", server.port, [stream], params),
                Job("latency_pub", server.port, [stream], params)]
        results, sampler = _phase(server, jobs)
        sub = next(r for r in results if "p99_ms" in r)
        pub = next(r for r in results if "sent" in r)
        expected = int(sz.lat_rate * sz.lat_seconds)
        return [_cpu(Row("latency", f"latency at {sz.lat_rate:,} msg/s x {sz.small} B", server.name,
                    sz.small, expected, sent=pub["sent"], confirmed=pub["confirmed"],
                    consumed=sub["records"], errors=pub["errors"], chunks=sub["chunks"],
                    seconds=pub["t1"] - pub["t0"], p50_ms=sub["p50_ms"], p99_ms=sub["p99_ms"],
                    rss_peak_mb=sampler.peak_mb, rss_end_mb=sampler.last_mb,
                    measures="consumed",
                    extra={"max_ms": sub["max_ms"], "samples": sub["samples"],
                           "server_errors": _errors(results)}), results, sampler)]
    finally:
        admin_sync(server.port, delete=[stream])


def many_streams(server: Server, sz: Sizes, procs: int = 2) -> list[Row]:
    """Publish ``many_total`` messages spread over ``many_streams`` streams; RSS after."""
    streams = [f"bench-many-{i}" for i in range(sz.many_streams)]
    admin_sync(server.port, create=streams, delete=streams)
    try:
        per = sz.many_total // sz.many_streams
        jobs = [Job("publish", server.port, part, {"count": per, "size": sz.small})
                for part in _split(streams, procs)]
        results, sampler = _phase(server, jobs)
        time.sleep(1.0)  # let the broker settle, then read its RSS with all streams open
        row = _publish_row("many-streams",
                           f"{sz.many_total:,} x {sz.small} B over {sz.many_streams} streams",
                           server, sz.small, per * sz.many_streams, results, sampler)
        row.rss_end_mb = server.rss() / MB
        return [row]
    finally:
        admin_sync(server.port, delete=streams)


def stalled_consumer(server: Server, sz: Sizes) -> list[Row]:
    """A consumer with credit that never reads its socket while a publisher pushes."""
    stream = "bench-stalled"
    admin_sync(server.port, create=[stream], delete=[stream])
    try:
        baseline = server.rss() / MB
        seen: dict[str, float] = {}

        def until(out: list[dict[str, Any] | None]) -> bool:
            if out[1] is None:
                return False
            seen.setdefault("done", time.monotonic())
            return time.monotonic() - seen["done"] >= sz.stall_hold

        jobs = [Job("stalled", server.port, [stream], {"credit": 64}),
                Job("publish", server.port, [stream], {"count": sz.stall_count,
                                                       "size": sz.large})]
        results, sampler = _phase(server, jobs, until=until)
        pub = [r for r in results if "sent" in r]
        row = _publish_row("stalled", f"{sz.stall_count:,} x {sz.large} B while a consumer "
                           "stops reading", server, sz.large, sz.stall_count, pub, sampler)
        stalled = next(r for r in results if "sent" not in r)
        row.extra.update(rss_baseline_mb=baseline, rss_growth_mb=sampler.peak_mb - baseline,
                         stalled_records=stalled["records"],
                         rss_series_mb=[round(s / MB, 1) for _, s in sampler.samples])
        return [row]
    finally:
        admin_sync(server.port, delete=[stream])


WORKLOADS: dict[str, Callable[[Server, Sizes], list[Row]]] = {
    "small": lambda srv, sz: publish_then_consume(srv, sz, sz.small, sz.pub_small),
    "large": lambda srv, sz: publish_then_consume(srv, sz, sz.large, sz.pub_large),
    "fan": fan,
    "latency": latency,
    "many": many_streams,
    "stalled": stalled_consumer,
    "protocols": lambda srv, sz: _protocols(srv, sz),
}


def _protocols(server: Server, sz: Sizes) -> list[Row]:
    from .protocols import protocols  # it builds on this module's helpers

    return protocols(server, sz)
