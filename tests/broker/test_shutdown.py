"""SIGTERM is the broker's drain (the StatefulSet's preStop only waits for the endpoints): it
stops listening, keeps every confirmed message, closes client connections, and exits 0."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest
from rstream import AMQPMessage, OnClosedErrorInfo, Producer

from streamlet.client import connect
from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process

N = 2000


async def test_sigterm_keeps_confirmed_messages_and_closes_clients(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory()
    closed: list[OnClosedErrorInfo] = []

    async def on_close(info: OnClosedErrorInfo) -> None:
        closed.append(info)

    producer = Producer(b.host, b.port, username="guest", password="guest",
                        on_close_handler=on_close)
    await producer.start()
    try:
        await producer.create_stream("drained")
        for i in range(0, N, 100):
            await producer.send_batch("drained", [AMQPMessage(body=b"m%d" % j)
                                                  for j in range(i, i + 100)])
        await producer.send_wait("drained", AMQPMessage(body=b"last"))  # all before it confirmed
        assert await asyncio.to_thread(b.stop) == 0
        for _ in range(100):  # the client learns at once; bounded, not timed
            if closed:
                break
            await asyncio.sleep(0.05)
        assert closed, "rstream was not told the connection closed"
    finally:
        await asyncio.wait_for(producer.close(), 10)
    with socket.socket() as s:  # nothing listens any more
        assert s.connect_ex((b.host, b.port)) != 0

    b.start()
    client = await connect(b.host, b.port)
    try:
        stats = await client.stream_stats("drained")
        reader = await client.consumer("drained", offset="first")
        count = 0
        async for message in reader:
            count += 1
            if message.offset >= stats["committed_chunk_id"] and message.body.endswith(b"last"):
                break
        await reader.close()
    finally:
        await client.close()
    assert count == N + 1
