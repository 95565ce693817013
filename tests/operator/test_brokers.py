"""The broker adapter against real broker processes: pooled connections, failures, copying."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from streamlet.client import connect
from streamlet_operator.brokers import BrokerUnavailable, ClientBrokerAdmin
from streamlet_operator.moves import MOVE_REFERENCE, copy_stream
from tests.operator.latency import delayed
from tests.support.brokers import BrokerProcess, free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

BrokerFactory = Callable[..., BrokerProcess]


async def test_connections_are_reused_and_replaced(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    admin = ClientBrokerAdmin()
    address = (broker.host, broker.port)
    try:
        async with admin.session(address, "guest", "guest") as first:
            assert await first.create_stream("pooled", {"max-age": "1h"})
        async with admin.session(address, "guest", "guest") as again:
            assert not await again.create_stream("pooled", {})  # it exists: nothing done
            assert again._client is first._client  # type: ignore[attr-defined]
        broker.restart()  # same address, same data; the pooled connection is dead
        await eventually(lambda: first._client.closed,  # type: ignore[attr-defined]
                         what="the pooled connection seen closed")
        async with admin.session(address, "guest", "guest") as after:
            assert after._client is not first._client  # type: ignore[attr-defined]
            assert await after.stream_exists("pooled")
    finally:
        await admin.close()


async def test_unreachable_or_refused_is_broker_unavailable(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    admin = ClientBrokerAdmin()
    try:
        with pytest.raises(BrokerUnavailable, match="refused the operator"):
            async with admin.session((broker.host, broker.port), "guest", "wrong"):
                pass
        with pytest.raises(BrokerUnavailable, match="cannot reach"):
            async with admin.session(("127.0.0.1", free_port()), "guest", "guest"):
                pass
    finally:
        await admin.close()


async def test_copy_stream_keeps_messages_and_offsets(broker_factory: BrokerFactory) -> None:
    source, target = broker_factory(), broker_factory()
    client = await connect(source.host, source.port)
    try:
        await client.create_stream("big")
        producer = await client.producer("big", batch_size=50)
        for start in range(0, 3000, 300):  # several publishes: many chunks
            await producer.send_many([b"m%d" % i for i in range(start, start + 300)])
            await producer.flush()
        await producer.close()
    finally:
        await client.close()

    admin = ClientBrokerAdmin()
    try:
        async with admin.session((source.host, source.port), "guest", "guest") as old, \
                admin.session((target.host, target.port), "guest", "guest") as new:
            assert await new.create_stream("big", {})
            assert await copy_stream(old, new, "big") == 3000
            # Copies are deduplicated on the target (a move resumes, never doubles).
            assert await copy_stream(old, new, "big") == 0
            assert (await new.stream_stats("big")).last_offset > 0
    finally:
        await admin.close()

    client = await connect(target.host, target.port)
    try:
        consumer = await client.consumer("big", offset="first")
        got = []
        async for message in consumer:
            got.append((message.offset, message.body))
            if len(got) == 3000:
                break
        await consumer.close()
    finally:
        await client.close()
    assert got == [(i, b"m%d" % i) for i in range(3000)]


async def test_copy_stream_keeps_the_wire_busy(broker_factory: BrokerFactory) -> None:
    """A move's tail is what producers sent until the seal: often thousands of chunks of a few
    messages. The copy sends chunk after chunk and waits for confirms once, at the end: with
    a round trip per chunk, a minute of traffic took minutes to copy (under load in the tests,
    more than the 20 s the move had). Here the target is 50 ms away: waiting for each of 300
    chunks' confirms takes at least 15 s on any machine."""
    chunks, delay = 300, 0.025
    source, target = broker_factory(), broker_factory()
    client = await connect(source.host, source.port)
    try:
        await client.create_stream("small")
        producer = await client.producer("small")
        for i in range(chunks):  # one confirmed publish at a time: a chunk each
            await producer.send(b"s%d" % i)
            await producer.flush()
        await producer.close()
        assert (await client.stream_stats("small"))["last_chunk_id"] == chunks - 1
    finally:
        await client.close()

    admin = ClientBrokerAdmin()
    try:
        async with delayed((target.host, target.port), delay) as far, \
                admin.session((source.host, source.port), "guest", "guest") as old, \
                admin.session(far, "guest", "guest") as new:
            assert await new.create_stream("small", {})
            started = time.monotonic()
            assert await copy_stream(old, new, "small") == chunks
            took = time.monotonic() - started
            assert await new.publisher_sequence("small", MOVE_REFERENCE) == chunks
    finally:
        await admin.close()
    assert took < chunks * 2 * delay / 3, f"{chunks} chunks took {took:.1f} s to copy"
