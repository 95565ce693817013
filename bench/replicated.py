"""The replicated workload: a stream with 3 members on a 3-node cluster of each
server, run the same way against both.

Four parts: publish to the leader then catch-up consume from a follower; publish-to-deliver
latency at a fixed rate on the leader; a member's catch-up after being stopped while 1 GB is
published; failover, the time from kill -9 of the leader to the first confirm on the new one.
What each measures and why: docs/performance.md#replicated-streams-3-members.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

from streamlet.client import StreamletError
from streamlet.client.connection import Connection
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Code
from streamlet.storage.chunk import ChunkHeader

from .client import CREATED_OR_EXISTS, BenchError, connect, credit, request
from .failover import failover_seconds, leader_port
from .servers import ClusterServer
from .workers import Job
from .workloads import Row, Sizes, _consume_row, _cpu, _errors, _phase, _publish_row

MEMBERS = 3


async def _create(port: int, stream: str, members: int,
                  timeout: float = 60) -> tuple[int, list[int]]:
    """Create ``stream`` with ``members`` members through ``port``; the leader's port and the
    replicas' ports once Metadata names all of them."""
    conn, _ = await connect(port)
    try:
        await request(conn, lambda c: f.Delete(c, stream), (Code.OK, Code.STREAM_DOES_NOT_EXIST))
        await request(conn, lambda c: f.Create(c, stream, {"initial-cluster-size": str(members)}),
                      CREATED_OR_EXISTS)
        deadline = time.monotonic() + timeout
        while True:
            answer = await request(conn, lambda c: f.Metadata(c, [stream]))
            leader = leader_port(answer, stream)
            brokers = {b.reference: b.port for b in answer.brokers}
            replicas = [brokers[r] for s in answer.streams if s.stream == stream
                        for r in s.replicas if r in brokers]
            if leader is not None and len(replicas) >= members - 1:
                return leader, replicas
            if time.monotonic() > deadline:
                raise BenchError(f"{stream}: Metadata named leader {leader}, replicas "
                                 f"{replicas} after {timeout:.0f} s")
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


async def _delete(ports: list[int], stream: str) -> None:
    """Delete through the first node that takes it (the leader may have moved)."""
    for port in ports:
        with contextlib.suppress(BenchError, OSError, TimeoutError, asyncio.TimeoutError):
            conn, _ = await asyncio.wait_for(connect(port), 5)
            try:
                await request(conn, lambda c: f.Delete(c, stream),
                              (Code.OK, Code.STREAM_DOES_NOT_EXIST))
                return
            finally:
                await conn.close()


def _delete_sync(srv: ClusterServer, stream: str, leader: int | None = None) -> None:
    ports = ([leader] if leader else []) + [p for p in srv.ports if p != leader]
    with contextlib.suppress(Exception):
        asyncio.run(_delete(ports, stream))


def publish_then_consume(srv: ClusterServer, sz: Sizes, size: int, count: int,
                         run_no: int) -> list[Row]:
    stream = f"bench-r3-{size}-{run_no}"
    leader, replicas = asyncio.run(_create(srv.ports[0], stream, MEMBERS))
    try:
        label = f"3 members: {count:,} x {size} B"
        results, sampler = _phase(srv, [Job("publish", leader, [stream],
                                            {"count": count, "size": size})])
        pub = _publish_row(f"r3-publish-{size}", f"{label}: publish to the leader", srv, size,
                           count, results, sampler)
        reads = []
        for _ in range(max(1, sz.consume_reps)):
            results, sampler = _phase(srv, [Job("consume", replicas[0], [stream],
                                                {"count": count})])
            reads.append(_consume_row(f"r3-consume-{size}",
                                      f"{label}: catch-up consume from a follower", srv, size,
                                      count, results, sampler))
        con = sorted(reads, key=lambda r: r.msg_s)[len(reads) // 2]
        con.extra["reads_msg_s"] = [r.msg_s for r in reads]
        if not all(r.exact for r in reads):
            con.errors += 1
        pub.extra.update(leader=leader, replicas=replicas)
        con.extra.update(leader=leader, read_from=replicas[0])
        return [pub, con]
    finally:
        _delete_sync(srv, stream, leader)


def latency(srv: ClusterServer, sz: Sizes, run_no: int) -> list[Row]:
    stream = f"bench-r3-latency-{run_no}"
    leader, _ = asyncio.run(_create(srv.ports[0], stream, MEMBERS))
    try:
        params = {"rate": sz.lat_rate, "duration": sz.lat_seconds, "size": sz.small,
                  "warmup": sz.lat_warmup}
        results, sampler = _phase(srv, [Job("latency_sub", leader, [stream], params),
                                        Job("latency_pub", leader, [stream], params)])
        sub = next(r for r in results if "p99_ms" in r)
        pub = next(r for r in results if "sent" in r)
        return [_cpu(Row("r3-latency", f"3 members: latency at {sz.lat_rate:,} msg/s x "
                         f"{sz.small} B (publish to deliver, on the leader)", srv.name,
                         sz.small, int(sz.lat_rate * sz.lat_seconds), sent=pub["sent"],
                         confirmed=pub["confirmed"], consumed=sub["records"],
                         errors=pub["errors"], chunks=sub["chunks"],
                         seconds=pub["t1"] - pub["t0"], p50_ms=sub["p50_ms"],
                         p99_ms=sub["p99_ms"], rss_peak_mb=sampler.peak_mb,
                         rss_end_mb=sampler.last_mb, measures="consumed",
                         extra={"max_ms": sub["max_ms"], "samples": sub["samples"],
                                "server_errors": _errors(results)}), results, sampler)]
    finally:
        _delete_sync(srv, stream, leader)


def failover_row(server: str, size: int, rate: int, kill_at: float, killed_pid: int,
                 res: dict[str, Any]) -> Row:
    """The failover figures from the kill time and the publisher's report."""
    took = failover_seconds(kill_at, res.get("first_new_confirm", 0.0))
    took_txt = "none" if took is None else f"{took * 1000:,.0f} ms"
    sent = int(res.get("sent_after", 0))
    row = Row("r3-failover", f"3 members: failover, kill -9 of the leader while publishing "
              f"{rate:,} msg/s x {size} B: {took_txt} to the first new confirm", server, size,
              sent, sent=sent, confirmed=int(res.get("confirmed_after", 0)),
              errors=int(res.get("errors_after", 0)) + (1 if took is None else 0),
              seconds=max(0.0, res.get("t1", 0.0) - res.get("reattached_at", 0.0)))

    def since_kill(key: str) -> float | None:
        t = res.get(key, 0.0)
        return round((t - kill_at) * 1000, 1) if t and kill_at else None

    row.extra.update(
        failover_ms=None if took is None else took * 1000, killed_pid=killed_pid,
        lost_ms=since_kill("lost_at"), reattached_ms=since_kill("reattached_at"),
        unconfirmed_at_kill=int(res.get("sent_before", 0)) - int(res.get("confirmed_before", 0)),
        attempts=res.get("attempts"), server_errors=res.get("server_errors", []))
    return row


def failover(srv: ClusterServer, sz: Sizes, run_no: int) -> list[Row]:
    stream = f"bench-r3-failover-{run_no}"
    leader, _ = asyncio.run(_create(srv.ports[0], stream, MEMBERS))
    # the leader as the cluster's own bookkeeping names it (directory.json, stream_status)
    deadline = time.monotonic() + 30
    named = srv.leader_port(stream)
    while named is None and time.monotonic() < deadline:
        time.sleep(0.2)
        named = srv.leader_port(stream)
    if named is not None and named != leader:
        raise BenchError(f"{stream}: Metadata says leader {leader}, the cluster {named}")
    state: dict[str, float] = {}

    def until(out: list[dict[str, Any] | None]) -> bool:
        now = time.monotonic()
        start = state.setdefault("released", now)
        if "kill_at" not in state and now - start >= sz.fail_kill_after:
            pid = srv.pid_on_port(leader)
            state["pid"] = pid
            state["kill_at"] = time.monotonic()
            if pid:
                os.kill(pid, signal.SIGKILL)
        return False

    params = {"ports": srv.ports, "rate": sz.lat_rate, "size": sz.small,
              "after": sz.fail_after, "timeout": sz.fail_kill_after + 90}
    try:
        results, sampler = _phase(srv, [Job("failover_pub", leader, [stream], params)],
                                  until=until)
        row = failover_row(srv.name, sz.small, sz.lat_rate, state.get("kill_at", 0.0),
                           int(state.get("pid", 0)), results[0])
        row.extra["leader"] = leader
        # no broker CPU: the killed process's time leaves the sum over the nodes mid-phase
        row.rss_peak_mb, row.rss_end_mb = sampler.peak_mb, sampler.last_mb
        return [row]
    finally:
        _delete_sync(srv, stream)


_OFFSET = 4  # Subscribe's offset type "offset"


class _Reaches:
    """A subscription's sink that sets ``done`` once a chunk holding ``target`` arrives."""

    def __init__(self, conn: Connection, stream: str, target: int) -> None:
        self.conn, self.stream, self.target = conn, stream, target
        self.done = asyncio.Event()

    def _on_chunk(self, header: ChunkHeader, data: memoryview) -> None:
        if header.next_offset > self.target:
            self.done.set()
        credit(self.conn, 1, 1)

    def _on_consumer_update(self, correlation_id: int, active: bool) -> None:
        pass

    def _on_closed(self, exc: StreamletError) -> None:
        pass


async def _holds(port: int, stream: str, target: int, timeout: float) -> bool:
    """Whether the member on ``port`` delivers offset ``target`` within ``timeout`` seconds: a
    consumer on a member reads that member's own log (both servers), so the chunk holding it
    comes once the member has it (and knows it committed)."""
    conn, _ = await connect(port)
    try:
        sink = _Reaches(conn, stream, target)
        conn.subscribers[1] = sink
        await request(conn, lambda c: f.Subscribe(c, 1, stream, _OFFSET, target, 10, {}))
        with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
            await asyncio.wait_for(sink.done.wait(), timeout)
        return sink.done.is_set()
    finally:
        await conn.close()


def catch_up(srv: ClusterServer, sz: Sizes, run_no: int) -> list[Row]:
    """A member that was stopped (SIGSTOP) while ``sz.catchup_bytes`` were published (the
    other two confirm), then let go (SIGCONT): the time until a consumer attached to it gets
    the last message. It moves what a new member would (one whose log is empty), over the same
    link."""
    stream = f"bench-r3-catchup-{run_no}"
    size = sz.large
    count = max(1, sz.catchup_bytes // size)
    leader, replicas = asyncio.run(_create(srv.ports[0], stream, MEMBERS))
    lagging = replicas[-1]
    pid = srv.pid_on_port(lagging)
    label = f"3 members: catch-up of a member stopped while {count * size / 1e9:.2f} GB were published"
    row = Row("r3-catchup", label, srv.name, size, count, measures="consumed")
    try:
        os.kill(pid, signal.SIGSTOP)
        try:
            results, _ = _phase(srv, [Job("publish", leader, [stream],
                                          {"count": count, "size": size})])
        finally:
            os.kill(pid, signal.SIGCONT)
            released = time.monotonic()
        row.confirmed = sum(int(r.get("confirmed", 0)) for r in results)
        caught = asyncio.run(_holds(lagging, stream, count - 1, 300))
        took = time.monotonic() - released
        row.seconds = took
        row.consumed = count if caught else 0
        row.errors = 0 if caught and row.confirmed >= count else 1
        row.extra.update(catchup_s=round(took, 3) if caught else None, leader=leader,
                         lagging=lagging, mb_s=round(count * size / 1e6 / took, 1))
        return [row]
    finally:
        _delete_sync(srv, stream, leader)


def replicated(srv: ClusterServer, sz: Sizes, run_no: int = 0) -> list[Row]:
    """Every part of the workload once; the failover last (it kills a node, which the next
    run's ``ensure_up`` brings back)."""
    srv.ensure_up()
    rows = publish_then_consume(srv, sz, sz.small, sz.pub_small, run_no)
    rows += publish_then_consume(srv, sz, sz.large, sz.pub_large, run_no)
    rows += latency(srv, sz, run_no)
    rows += catch_up(srv, sz, run_no)
    rows += failover(srv, sz, run_no)
    return rows
