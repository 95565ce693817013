"""A publisher that rides through a leader's death: the failover measurement's client side.

It publishes at a steady rate to a stream's leader. When its connection drops (or the broker
says the stream moved: MetadataUpdate, refused publishes), it asks Metadata on every node in
turn until one names a leader (0xFFFF means electing: retry), connects there, declares its
publisher again (a refusal means not the leader yet: retry) and goes on publishing new
messages. It reports when the first confirm came on a connection opened after the loss: the
runner, which killed the leader, takes the failover time from that.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from streamlet.client import StreamletError
from streamlet.client.connection import Connection
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import NO_LEADER, Code
from streamlet.rabbitmq.publish import PUBLISH_HEAD_SIZE, set_publish_head

from .client import BenchError, connect, request
from .load import _TS_MSG, frame_template


def leader_port(answer: f.MetadataResponse, stream: str) -> int | None:
    """The leader's port in a Metadata answer; None while electing or when unknown."""
    brokers = {b.reference: b.port for b in answer.brokers}
    for s in answer.streams:
        if s.stream == stream:
            if s.code != Code.OK or s.leader == NO_LEADER:
                return None
            return brokers.get(s.leader)
    return None


class _Sink:
    """Counts one connection's confirms (the first one's time is kept); ``moved`` once the
    broker refused publishes, said the stream moved (MetadataUpdate) or closed."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.confirmed = 0
        self.errored = 0
        self.first_confirm = 0.0
        self.moved = False
        self.errors: list[str] = []

    def _on_confirm(self, ids: tuple[int, ...]) -> None:
        if not self.first_confirm:
            self.first_confirm = time.monotonic()
        self.confirmed += len(ids)

    def _on_publish_error(self, errors: list[tuple[int, int]]) -> None:
        self.errored += len(errors)
        self.errors.append(f"publish errors: {errors[:3]}...")
        self.moved = True

    def _on_closed(self, exc: StreamletError) -> None:
        self.errors.append(str(exc))
        self.moved = True


async def _attach(port: int, stream: str,
                  timeout: float = 2.0) -> tuple[Connection, _Sink] | None:
    """Metadata on ``port``; if it names a leader, a connection there with publisher 0
    declared, else None."""
    conns: list[Connection] = []
    try:
        async with asyncio.timeout(timeout):
            conn, _ = await connect(port)
            conns.append(conn)
            answer = await request(conn, lambda c: f.Metadata(c, [stream]))
            where = leader_port(answer, stream)
            if where is None:
                return None
            if where != port:
                conn, _ = await connect(where)
                conns.append(conn)
            sink = _Sink(stream)
            conn.publishers[0] = sink
            await request(conn, lambda c: f.DeclarePublisher(c, 0, "", stream))
            conns.remove(conn)
            return conn, sink
    except (BenchError, StreamletError, OSError, TimeoutError):
        return None
    finally:
        for c in conns:
            with contextlib.suppress(Exception):
                if c.transport is not None:
                    c.transport.close()


async def attach_first(stream: str, port: int) -> tuple[Connection, _Sink]:
    got = await _attach(port, stream)
    if got is None:
        raise BenchError(f"no leader for {stream} via port {port}")
    return got


async def run(stream: str, got: tuple[Connection, _Sink], ports: list[int], rate: int, size: int,
              after: float, deadline: float, tick: float = 0.001) -> dict[str, Any]:
    """Publish at ``rate`` msg/s from now on the attached connection ``got``; once confirms
    flow on a new leader for ``after`` seconds (or at ``deadline``, a monotonic time), stop
    and report."""
    size = max(size, 8)
    template = frame_template(0, 100, bytes(size))
    stride = 12 + size
    conn, sink = got
    t0 = time.monotonic()
    sent = 0  # publishing ids over every connection
    on_conn_sent = 0  # sent on the current connection
    old_sent = old_confirmed = 0  # totals on the connections before the current one
    lost_at = 0.0
    reattached_at = 0.0
    first_new_confirm = 0.0
    attempts = 0
    base_t, base_n = t0, 0  # the schedule restarts on each new connection: no backlog burst
    while time.monotonic() < deadline:
        now = time.monotonic()
        if sink.moved or conn.closed is not None:
            lost_at = lost_at or now
            old_sent += on_conn_sent
            old_confirmed += sink.confirmed
            if conn.transport is not None:
                conn.transport.close()
            new = None
            while new is None and time.monotonic() < deadline:
                for port in ports:
                    attempts += 1
                    new = await _attach(port, stream)
                    if new is not None:
                        break
                if new is None:
                    await asyncio.sleep(0.05)
            if new is None:
                break
            conn, sink = new
            reattached_at = time.monotonic()
            on_conn_sent = 0
            base_t, base_n = reattached_at, sent
            continue
        if reattached_at and sink.first_confirm:
            first_new_confirm = first_new_confirm or sink.first_confirm
            if now - first_new_confirm >= after:
                break
        due = base_n + int((now - base_t) * rate) + 1
        while sent < due and not conn.paused:
            n = min(due - sent, 100)
            ts = time.monotonic_ns()
            pos = PUBLISH_HEAD_SIZE
            for i in range(sent, sent + n):
                _TS_MSG.pack_into(template, pos, i, size, ts)
                pos += stride
            set_publish_head(template, pos, 0, n)
            conn.write(bytes(template[:pos]))
            sent += n
            on_conn_sent += n
        await asyncio.sleep(tick)
    # the last connection: let the confirms of what it was sent arrive (bounded)
    end = time.monotonic() + 5
    while reattached_at and sink.confirmed + sink.errored < on_conn_sent and \
            time.monotonic() < end and conn.closed is None:
        await asyncio.sleep(0.01)
    t1 = time.monotonic()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(conn.close(), 5)
    return {
        "t0": t0, "t1": t1, "lost_at": lost_at, "reattached_at": reattached_at,
        "first_new_confirm": (first_new_confirm or sink.first_confirm) if reattached_at else 0.0,
        "sent_before": old_sent, "confirmed_before": old_confirmed,
        "sent_after": on_conn_sent if reattached_at else 0,
        "confirmed_after": sink.confirmed if reattached_at else 0,
        "errors_after": sink.errored if reattached_at else 0,
        "attempts": attempts, "server_errors": sink.errors[:5],
    }


def failover_seconds(kill_at: float, first_new_confirm: float) -> float | None:
    """From the kill to the first confirm on a connection opened after it; None when no such
    confirm came (or the times are not in that order)."""
    if not kill_at or not first_new_confirm or first_new_confirm < kill_at:
        return None
    return first_new_confirm - kill_at
