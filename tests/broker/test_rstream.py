"""rstream (PyPI) against a real broker process: the client RabbitMQ users run today."""

from __future__ import annotations

import asyncio
import time

import pytest
from rstream import (
    ConfirmationStatus,
    ConsumerOffsetSpecification,
    OffsetType,
    OnClosedErrorInfo,
    RawMessage,
)
from rstream import Consumer as RConsumer
from rstream import Producer as RProducer

from streamlet.core.packing import CHUNK_MAX_ENTRIES, CHUNK_MIN_ENTRIES
from tests.support.brokers import BrokerProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

N = 100_000


def producer(b: BrokerProcess) -> RProducer:
    return RProducer(b.host, b.port, username="guest", password="guest")


def consumer(b: BrokerProcess) -> RConsumer:
    return RConsumer(b.host, b.port, username="guest", password="guest")


async def publish(b: BrokerProcess, stream: str, bodies: list[bytes], name: str | None = None) -> None:
    async with producer(b) as p:
        for i in range(0, len(bodies), 1000):
            await p.send_batch(stream, [RawMessage(x) for x in bodies[i : i + 1000]],
                               publisher_name=name)


async def consume(b: BrokerProcess, stream: str, spec: ConsumerOffsetSpecification, count: int,
                  timeout: float = 60.0) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    done = asyncio.Event()

    async def on_message(msg: bytes, ctx) -> None:  # type: ignore[no-untyped-def]
        got.append((ctx.offset, bytes(msg)))
        if len(got) >= count:
            done.set()

    async with consumer(b) as c:
        await c.subscribe(stream, on_message, offset_specification=spec, decoder=lambda x: x)
        await asyncio.wait_for(done.wait(), timeout)
    return got


async def test_round_trip_100k(shared_broker: BrokerProcess) -> None:
    stream = "rstream-100k"
    async with producer(shared_broker) as p:
        await p.create_stream(stream)
    bodies = [b"m%07d" % i for i in range(N)]
    await publish(shared_broker, stream, bodies)
    got = await consume(shared_broker, stream, ConsumerOffsetSpecification(OffsetType.FIRST), N)
    assert [o for o, _ in got[:N]] == list(range(N))
    assert [m for _, m in got[:N]] == bodies


async def test_a_publish_frame_over_frame_max_is_confirmed(shared_broker: BrokerProcess) -> None:
    """rstream's send_batch puts the whole batch in one Publish frame, whatever the frame_max
    agreed in Tune (1 MiB here): 15,000 x 100 B make a frame of about 1.7 MB. RabbitMQ confirms
    such frames (3.10.8 took 64 MB); the broker takes them up to server.frame_limit."""
    stream = "rstream-big-frame"
    bodies = [b"%07d" % i + b"x" * 93 for i in range(15_000)]
    assert sum(12 + len(b) for b in bodies) > 1_048_576
    confirmed: list[int] = []

    def on_confirm(status: ConfirmationStatus) -> None:
        if status.is_confirmed:
            confirmed.append(status.message_id)

    async with producer(shared_broker) as p:
        await p.create_stream(stream)
        await p.send_batch(stream, [RawMessage(b) for b in bodies], on_publish_confirm=on_confirm)
        await eventually(lambda: len(confirmed) >= len(bodies), 60, "every message confirmed")
    got = await consume(shared_broker, stream, ConsumerOffsetSpecification(OffsetType.FIRST),
                        len(bodies))
    assert [o for o, _ in got] == list(range(len(bodies)))
    assert [m for _, m in got] == bodies


def burst_tail(n: int) -> int:
    """The last chunk of a burst of ``n`` messages after a quiet spell: chunks start at
    CHUNK_MIN_ENTRIES entries and double (streams.py)."""
    size = CHUNK_MIN_ENTRIES
    while n > size:
        n, size = n - size, min(2 * size, CHUNK_MAX_ENTRIES)
    return n


async def test_last_after_one_big_batch_gives_its_tail(shared_broker: BrokerProcess) -> None:
    """One Publish frame of 4,999 messages, then a consumer at `last`: it gets the tail of the
    batch, as on RabbitMQ (its writer split such a batch into chunks of 32 .. 2,048; 935
    messages came back there), not a replay of all 4,999."""
    stream = "rstream-last-tail"
    n = 4_999
    async with producer(shared_broker) as p:
        await p.create_stream(stream)
        await p.send_batch(stream, [RawMessage(b"t%d" % i) for i in range(n)])
    # wait for the whole batch, so `last` is taken after it is stored
    await consume(shared_broker, stream, ConsumerOffsetSpecification(OffsetType.OFFSET, n - 1), 1)
    got = await consume(shared_broker, stream, ConsumerOffsetSpecification(OffsetType.LAST), 1)
    assert got[0][0] > 0, "`last` replayed the whole batch"
    tail = burst_tail(n)
    assert tail == 4_999 - (256 + 512 + 1024 + 2048)
    got = await consume(shared_broker, stream, ConsumerOffsetSpecification(OffsetType.LAST), tail)
    assert [o for o, _ in got] == list(range(n - tail, n))
    assert got[-1] == (n - 1, b"t%d" % (n - 1))


async def test_offset_specifications(shared_broker: BrokerProcess) -> None:
    stream = "rstream-specs"
    async with producer(shared_broker) as p:
        await p.create_stream(stream)
    await publish(shared_broker, stream, [b"a%d" % i for i in range(100)])
    before_second = int(time.time() * 1000)
    await asyncio.sleep(0.05)  # the scenario: the clock moves on between the two batches
    await publish(shared_broker, stream, [b"b%d" % i for i in range(100)])

    first = await consume(shared_broker, stream, ConsumerOffsetSpecification(OffsetType.FIRST), 200)
    assert [o for o, _ in first[:200]] == list(range(200))

    at = await consume(shared_broker, stream, ConsumerOffsetSpecification(OffsetType.OFFSET, 150), 50)
    assert at[0] == (150, b"b50")

    ts = await consume(shared_broker, stream,
                       ConsumerOffsetSpecification(OffsetType.TIMESTAMP, before_second), 100)
    assert ts[0] == (100, b"b0")

    # last: the last chunk, which holds the most recent publish; it ends at offset 199
    last = await consume(shared_broker, stream, ConsumerOffsetSpecification(OffsetType.LAST), 1)
    assert 100 <= last[0][0] <= 199

    # next: nothing old, only what is published after subscribing
    got: list[tuple[int, bytes]] = []
    arrived = asyncio.Event()

    async def on_message(msg: bytes, ctx) -> None:  # type: ignore[no-untyped-def]
        got.append((ctx.offset, bytes(msg)))
        arrived.set()

    async with consumer(shared_broker) as c:
        await c.subscribe(stream, on_message, decoder=lambda x: x,
                          offset_specification=ConsumerOffsetSpecification(OffsetType.NEXT))
        await asyncio.sleep(0.2)  # the scenario: a quiet while in which nothing may arrive
        assert got == []
        await publish(shared_broker, stream, [b"after"])
        await asyncio.wait_for(arrived.wait(), 10)
    assert got == [(200, b"after")]


async def test_deduplication_across_producer_restart(shared_broker: BrokerProcess) -> None:
    stream = "rstream-dedup"
    async with producer(shared_broker) as p:
        await p.create_stream(stream)
        await p.send_batch(stream, [RawMessage(b"x%d" % i, publishing_id=i) for i in range(1, 11)],
                           publisher_name="app-1")
    async with producer(shared_broker) as p:
        # a restarted producer resends 6..15: 6..10 are duplicates and must not be stored again
        await p.send_batch(stream, [RawMessage(b"x%d" % i, publishing_id=i) for i in range(6, 16)],
                           publisher_name="app-1")
    got = await consume(shared_broker, stream, ConsumerOffsetSpecification(OffsetType.FIRST), 15)
    assert [m for _, m in got] == [b"x%d" % i for i in range(1, 16)]
    # the sequence survives a broker restart too
    shared_broker.restart()
    async with producer(shared_broker) as p:
        client = await p.default_client
        assert await client.query_publisher_sequence(stream=stream, reference="app-1") == 15


async def test_stored_offsets(shared_broker: BrokerProcess) -> None:
    stream = "rstream-offsets"
    async with producer(shared_broker) as p:
        await p.create_stream(stream)
    await publish(shared_broker, stream, [b"%d" % i for i in range(10)])
    async with consumer(shared_broker) as c:
        await c.subscribe(stream, lambda m, ctx: None, subscriber_name="reader-1")
        await c.store_offset(stream=stream, subscriber_name="reader-1", offset=7)

        async def stored() -> bool:  # StoreOffset has no answer: the query shows when it is applied
            return bool(await c.query_offset(stream=stream, subscriber_name="reader-1") == 7)

        await eventually(stored, what="the stored offset 7")
    shared_broker.restart()
    async with consumer(shared_broker) as c:
        assert await c.query_offset(stream=stream, subscriber_name="reader-1") == 7


async def test_delete_sends_metadata_update(shared_broker: BrokerProcess) -> None:
    stream = "rstream-delete"
    async with producer(shared_broker) as p:
        await p.create_stream(stream)
    updates: list[OnClosedErrorInfo] = []
    seen = asyncio.Event()

    def on_close(info: OnClosedErrorInfo) -> None:
        updates.append(info)
        seen.set()

    c = RConsumer(shared_broker.host, shared_broker.port, username="guest", password="guest",
                  on_close_handler=on_close)
    await c.start()
    try:
        await c.subscribe(stream, lambda m, ctx: None)
        async with producer(shared_broker) as admin:
            await admin.delete_stream(stream)
            assert not await admin.stream_exists(stream)
        await asyncio.wait_for(seen.wait(), 10)
    finally:
        await c.close()
    assert updates[0].reason == "Metadata Update"
    assert updates[0].streams == [stream]


async def test_missing_stream_subscription_is_refused(shared_broker: BrokerProcess) -> None:
    from rstream import StreamDoesNotExist

    async with consumer(shared_broker) as c:
        with pytest.raises(StreamDoesNotExist):
            await c.subscribe("no-such-stream", lambda m, ctx: None)
