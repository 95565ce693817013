"""streamlet.client when its broker dies: waiters fail with ConnectionClosed, nothing hangs,
and after a restart a new connection finds everything that was confirmed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streamlet.client import ConnectionClosed, connect
from streamlet.rabbitmq import Code

pytestmark = pytest.mark.process


async def test_kill_fails_waiters_and_confirmed_data_survives(broker: Any) -> None:
    client = await connect(broker.host, broker.port)
    await client.create_stream("survivor")
    producer = await client.producer("survivor", reference="w")
    await producer.send_many(b"%d" % i for i in range(5000))
    await producer.flush()
    consumer = await client.consumer("survivor", offset="next")
    waiting = asyncio.ensure_future(consumer.__anext__())

    broker.kill()
    with pytest.raises(ConnectionClosed) as e:
        await asyncio.wait_for(waiting, 30)
    assert e.value.code == Code.STREAM_NOT_AVAILABLE
    with pytest.raises(ConnectionClosed):
        await producer.send(b"after the crash")
    with pytest.raises(ConnectionClosed):
        await client.stream_exists("survivor")
    await client.close()  # closing a dead client is fine

    broker.start()
    async with await connect(broker.host, broker.port) as again:
        assert await again.query_publisher_sequence("w", "survivor") == 5000
        consumer = await again.consumer("survivor")
        bodies = []
        async with asyncio.timeout(30):
            async for m in consumer:
                bodies.append(m.body)
                if len(bodies) == 5000:
                    break
        assert bodies == [b"%d" % i for i in range(5000)]
