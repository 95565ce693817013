"""Idle connections and heartbeats, against a real broker whose heartbeat is 1 s.

Connections of this project's client (a consumer on a quiet stream, an idle producer, a plain
client, and `streamlet consume` run as a user runs it) must outlive many intervals of silence,
as rstream's do; a peer that really sends nothing must still be closed, and a peer that sends
other frames but never a Heartbeat must not be.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rstream import AMQPMessage, MessageContext
from rstream import Consumer as RConsumer

from streamlet.client import Client, Message, connect
from streamlet.rabbitmq import frames as f
from tests.support.brokers import BrokerProcess
from tests.support.raw import RawPeer
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

HEARTBEAT = 1
#: the stretch of silence observed: twelve intervals (the broker gives up after two)
WINDOW = 12 * HEARTBEAT
CLI_CONSUMERS = 4
IDLE_CLIENTS = 4


@pytest.fixture
def hb_broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> BrokerProcess:
    cfg = tmp_path / "heartbeat.toml"
    cfg.write_text(f"[server]\nheartbeat = {HEARTBEAT}\n")
    return broker_factory(config=cfg)


def _silent_peer(b: BrokerProcess) -> float:
    """Open, then send nothing at all: seconds from the Open's answer until the broker closes."""
    with RawPeer(b.host, b.port, timeout=30) as peer:
        peer.handshake()  # through Open, echoing the broker's Tune (heartbeat 1)
        opened = time.monotonic()
        assert peer.closed()  # reads the broker's heartbeats until it closes
        return time.monotonic() - opened


def _talking_peer(b: BrokerProcess, stream: str, seconds: float) -> int:
    """Open, then for ``seconds`` send a Metadata request every 0.8 interval and never a
    Heartbeat: any frame is a sign of life. Returns how many requests were answered."""
    answered = 0
    with RawPeer(b.host, b.port, timeout=10) as peer:
        peer.handshake()  # through Open, echoing the broker's Tune (heartbeat 1)
        deadline = time.monotonic() + seconds
        while True:
            peer.send(f.Metadata(peer.next_corr(), [stream]))
            peer.recv_until(f.MetadataResponse)  # raises ConnectionError if closed
            answered += 1
            if time.monotonic() >= deadline:
                return answered
            time.sleep(0.8 * HEARTBEAT)  # the pace of this peer's traffic, not a wait for state


async def _drain(consumer: Any, into: list[Message]) -> None:
    async for m in consumer:
        into.append(m)


async def test_idle_connections_stay_open_and_a_silent_peer_is_closed(
    hb_broker: BrokerProcess,
) -> None:
    b = hb_broker
    stream = "quiet"
    admin = await connect(b.host, b.port, connection_name="idle-admin")
    await admin.create_stream(stream)
    assert admin.heartbeat == HEARTBEAT  # the client asked 60; the broker's 1 wins

    # this project's client: a consumer on the quiet stream, an idle publisher, the admin,
    # and clients that only connected
    consuming = await connect(b.host, b.port, connection_name="idle-consumer")
    consumer = await consuming.consumer(stream, "first")
    got: list[Message] = []
    drain = asyncio.create_task(_drain(consumer, got))
    publishing = await connect(b.host, b.port, connection_name="idle-producer")
    producer = await publishing.producer(stream)
    ours: dict[str, Client] = {"admin": admin, "consumer": consuming, "producer": publishing}
    for i in range(IDLE_CLIENTS):  # connected, then nothing at all to say
        ours[f"idle-{i}"] = await connect(b.host, b.port, connection_name=f"idle-{i}")

    # the CLI as a user runs it: `streamlet consume quiet` left waiting on a quiet stream
    clis = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streamlet", "consume", stream, "--host", b.host,
        "--port", str(b.port), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        for _ in range(CLI_CONSUMERS)]

    # rstream, for comparison (it would reconnect by itself: count its closes instead)
    rstream_closed: list[object] = []
    rstream_got: list[bytes] = []

    async def on_close(info: object) -> None:
        rstream_closed.append(info)

    async def on_message(msg: AMQPMessage, ctx: MessageContext) -> None:
        rstream_got.append(bytes(msg))  # type: ignore[call-overload]

    rconsumer = RConsumer(b.host, b.port, username="guest", password="guest",
                          on_close_handler=on_close)
    try:
        await rconsumer.start()
        await rconsumer.subscribe(stream, on_message)

        silent = asyncio.create_task(asyncio.to_thread(_silent_peer, b))
        talking = asyncio.create_task(asyncio.to_thread(_talking_peer, b, stream, WINDOW))

        # the thing observed: twelve intervals in which nobody but the broker has anything to
        # say; every connection must still be there at every moment of it
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < WINDOW:
            dead = [name for name, c in ours.items() if c.closed]
            dead += [f"cli-{i} (exit {p.returncode})" for i, p in enumerate(clis)
                     if p.returncode is not None]
            dead += ["rstream"] * bool(rstream_closed)
            dead += ["consumer task"] * drain.done()
            assert not dead, f"closed after {elapsed:.1f} s of idling: {dead}"
            await asyncio.sleep(0.1)

        # the peer that sent nothing was closed after two intervals and before a fourth
        silence = await asyncio.wait_for(silent, 30)
        assert 2 * HEARTBEAT - 0.2 <= silence <= 4 * HEARTBEAT, silence
        # the one that sent only Metadata requests was never closed
        assert await asyncio.wait_for(talking, 30) >= WINDOW / HEARTBEAT

        # and everything idle is usable: a message published now reaches every consumer
        assert await admin.stream_exists(stream)
        await producer.send(b"ping")
        await producer.flush()
        await eventually(lambda: [m.body for m in got] == [b"ping"], 10, "our consumer's message")
        await eventually(lambda: rstream_got == [b"ping"], 10, "rstream's message")
        for i, p in enumerate(clis):
            assert p.stdout is not None
            line = await asyncio.wait_for(p.stdout.readline(), 10)
            assert line == b"0\tping\n", (i, line)
        assert not rstream_closed
    finally:
        for p in clis:
            if p.returncode is None:
                p.terminate()
            await p.wait()
        drain.cancel()
        await rconsumer.close()
        for c in ours.values():
            await c.close()
    assert b.alive()
