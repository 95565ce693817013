"""streamlet.client against a real broker: publishing, confirms, deduplication, consuming."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from streamlet.client import Client, Consumer, Message, OffsetSpec, StreamletError, connect
from streamlet.rabbitmq import Code

pytestmark = pytest.mark.process


async def take(consumer: Consumer, n: int, timeout: float = 30.0) -> list[Message]:
    """The next ``n`` messages (a bound on waiting, not an assertion on speed)."""
    out: list[Message] = []

    async def run() -> None:
        async for m in consumer:
            out.append(m)
            if len(out) == n:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def take_none(consumer: Consumer, wait: float = 0.5) -> list[Message]:
    """Whatever arrives within ``wait`` seconds (used to show that nothing does)."""
    out: list[Message] = []
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(take_into(consumer, out), wait)
    return out


async def take_into(consumer: Consumer, out: list[Message]) -> None:
    async for m in consumer:
        out.append(m)


async def test_send_flush_then_consume_in_order(client: Client, stream: str) -> None:
    producer = await client.producer(stream)
    ids = [await producer.send(b"m%d" % i) for i in range(250)]
    assert ids == list(range(1, 251))
    await producer.flush()
    assert producer.confirmed_count == 250
    assert producer.last_confirmed == 250
    assert producer.unconfirmed == 0

    consumer = await client.consumer(stream, offset="first")
    got = await take(consumer, 250)
    assert [m.offset for m in got] == list(range(250))
    assert [m.body for m in got] == [b"m%d" % i for i in range(250)]
    now_ms = time.time() * 1000
    assert all(abs(m.timestamp - now_ms) < 3_600_000 for m in got)
    assert all(m.chunk_id <= m.offset for m in got)
    assert consumer.next_offset == 250
    await consumer.close()
    await producer.close()


async def test_send_many_spans_frames_and_chunks(client: Client, stream: str) -> None:
    n = 20_000
    producer = await client.producer(stream, batch_size=500, max_unconfirmed=3_000)
    last = await producer.send_many(b"%08d" % i for i in range(n))
    assert last == n
    await producer.flush()
    assert producer.confirmed_count == n

    consumer = await client.consumer(stream, credit=3)
    seen = 0
    async for header, records, first in consumer.chunks():
        assert first == seen  # contiguous, no gap, no repeat
        assert header.chunk_id == first
        assert records == [b"%08d" % i for i in range(first, first + len(records))]
        seen += len(records)
        if seen == n:
            break
    assert seen == n
    await consumer.close()


async def test_offset_spec_skips_earlier_records_of_the_first_chunk(
    client: Client, stream: str
) -> None:
    producer = await client.producer(stream)
    await producer.send_many(b"r%d" % i for i in range(100))  # one frame, likely one chunk
    await producer.flush()
    consumer = await client.consumer(stream, offset=37)
    got = await take(consumer, 63)
    assert [m.offset for m in got] == list(range(37, 100))
    assert got[0].body == b"r37"
    await consumer.close()

    consumer = await client.consumer(stream, offset=OffsetSpec.offset(99))
    chunks = consumer.chunks(copy=False)
    header, records, first = await asyncio.wait_for(chunks.__anext__(), 30)
    assert first == 99 and [bytes(r) for r in records] == [b"r99"]
    await consumer.close()


async def test_next_and_last_and_timestamp(client: Client, stream: str) -> None:
    producer = await client.producer(stream)
    await producer.send_many([b"old-a", b"old-b"])
    await producer.flush()

    nxt = await client.consumer(stream, offset="next")
    last = await client.consumer(stream, offset=OffsetSpec.last())
    future = await client.consumer(stream, offset=OffsetSpec.timestamp(int(time.time() * 1000) + 3_600_000))
    past = await client.consumer(stream, offset=OffsetSpec.timestamp(0))

    assert [m.body for m in await take(last, 2)] == [b"old-a", b"old-b"]
    assert [m.body for m in await take(past, 2)] == [b"old-a", b"old-b"]
    assert await take_none(nxt) == []
    await producer.send(b"new")
    await producer.flush()
    assert [(m.offset, m.body) for m in await take(nxt, 1)] == [(2, b"new")]
    assert [m.body for m in await take(future, 1)] == [b"new"]
    for c in (nxt, last, future, past):
        await c.close()


async def test_reference_continues_sequence_and_deduplicates(client: Client, stream: str) -> None:
    first = await client.producer(stream, reference="writer")
    assert first.next_publishing_id == 1
    await first.send_many(b"a%d" % i for i in range(10))
    await first.close()
    assert await client.query_publisher_sequence("writer", stream) == 10

    again = await client.producer(stream, reference="writer")
    assert again.next_publishing_id == 11
    for pid in range(6, 11):  # replays: confirmed, not stored
        await again.send(b"dup", publishing_id=pid)
    await again.send(b"fresh")
    await again.flush()
    assert again.confirmed_count == 6
    assert again.last_confirmed == 11
    await again.close()

    consumer = await client.consumer(stream)
    got = await take(consumer, 11)
    assert [m.body for m in got] == [b"a%d" % i for i in range(10)] + [b"fresh"]
    assert await take_none(consumer) == []
    await consumer.close()


async def test_slow_consumer_with_one_credit_gets_everything(client: Client, stream: str) -> None:
    producer = await client.producer(stream, batch_size=10)
    for i in range(30):  # separate flushes make separate chunks
        await producer.send_many([b"%d-%d" % (i, j) for j in range(10)])
        await producer.flush()
    consumer = await client.consumer(stream, credit=1)
    got: list[Message] = []
    async for m in consumer:
        got.append(m)
        if m.offset % 50 == 0:
            await asyncio.sleep(0.01)
        if len(got) == 300:
            break
    assert [m.offset for m in got] == list(range(300))
    await consumer.close()


async def test_named_consumer_stores_offset(client: Client, stream: str) -> None:
    producer = await client.producer(stream)
    await producer.send_many([b"x"] * 5)
    await producer.flush()
    consumer = await client.consumer(stream, name="app")
    got = await take(consumer, 5)
    await consumer.store_offset(got[-1].offset)
    for _ in range(100):
        if await client.query_offset("app", stream) == 4:
            break
        await asyncio.sleep(0.05)
    assert await client.query_offset("app", stream) == 4
    anonymous = await client.consumer(stream)
    with pytest.raises(ValueError):
        await anonymous.store_offset(1)
    await anonymous.close()
    await consumer.close()


async def test_close_ends_iteration(client: Client, stream: str) -> None:
    consumer = await client.consumer(stream)
    task = asyncio.ensure_future(take_into(consumer, []))
    await asyncio.sleep(0.1)  # the scenario: the task is left waiting in its iteration
    await consumer.close()
    await asyncio.wait_for(task, 10)  # ends, does not hang or raise
    assert consumer.closed


async def test_message_sizes_up_to_frame_max(shared_broker: Any, stream: str) -> None:
    async with await connect(shared_broker.host, shared_broker.port, frame_max=131072) as c:
        producer = await c.producer(stream, batch_size=10)
        big = bytes(range(256)) * 400  # 102,400 bytes: one per frame
        await producer.send_many([big, big, b""])
        await producer.flush()
        with pytest.raises(StreamletError) as e:
            await producer.send(b"x" * 131072)
        assert e.value.code == Code.FRAME_TOO_LARGE
        consumer = await c.consumer(stream)
        got = await take(consumer, 3)
        assert [m.body for m in got] == [big, big, b""]
        await consumer.close()


async def test_missing_stream_is_refused(client: Client) -> None:
    with pytest.raises(StreamletError) as e:
        await client.producer("no-such-stream-here")
    assert e.value.code == Code.STREAM_DOES_NOT_EXIST
    with pytest.raises(StreamletError) as e:
        await client.consumer("no-such-stream-here")
    assert e.value.code == Code.STREAM_DOES_NOT_EXIST
    assert await client.stream_exists("no-such-stream-here") is False  # connection still fine


async def test_deleted_stream_ends_consumer_with_stream_not_available(
    shared_broker: Any, client: Client, stream: str
) -> None:
    producer = await client.producer(stream)
    await producer.send_many([b"before"] * 3)
    await producer.flush()
    consumer = await client.consumer(stream)
    assert len(await take(consumer, 3)) == 3
    async with await connect(shared_broker.host, shared_broker.port) as admin:
        await admin.delete_stream(stream)
    with pytest.raises(StreamletError) as e:
        await asyncio.wait_for(take_into(consumer, []), 10)
    assert e.value.code == Code.STREAM_NOT_AVAILABLE
    with pytest.raises(StreamletError):
        await producer.send(b"after")
    assert not client.closed


async def test_many_producers_and_consumers_share_a_connection(client: Client, stream: str) -> None:
    producers = [await client.producer(stream) for _ in range(4)]
    for k, p in enumerate(producers):
        await p.send_many(b"p%d-%d" % (k, i) for i in range(500))
    for p in producers:
        await p.flush()
    consumers = [await client.consumer(stream, credit=2) for _ in range(3)]
    results = await asyncio.gather(*(take(c, 2000) for c in consumers))
    for got in results:
        assert [m.offset for m in got] == list(range(2000))
        assert sorted(m.body for m in got) == sorted(b"p%d-%d" % (k, i) for k in range(4) for i in range(500))
    for c in consumers:
        await c.close()
    for p in producers:
        await p.close()
