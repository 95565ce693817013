"""rbfly (PyPI, Cython) against a real broker process."""

from __future__ import annotations

import asyncio

import pytest
from rbfly.streams import Offset, PublisherBatchFast, get_message_ctx, streams_client

from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process

N = 100_000


def client(b: BrokerProcess):  # type: ignore[no-untyped-def]
    return streams_client(f"rabbitmq-stream://guest:guest@{b.host}:{b.port}")


async def _read(b: BrokerProcess, stream: str, offset: Offset, count: int) -> list[tuple[int, object]]:
    got: list[tuple[int, object]] = []
    c = client(b)
    try:
        async def run() -> None:
            async for body in c.subscribe(stream, offset=offset):
                got.append((get_message_ctx().stream_offset, body))
                if len(got) >= count:
                    return

        await asyncio.wait_for(run(), 60)
    finally:
        await c.disconnect()
    return got


async def test_round_trip_100k(shared_broker: BrokerProcess) -> None:
    stream = "rbfly-100k"
    c = client(shared_broker)
    try:
        await c.create_stream(stream)
        async with c.publisher(stream, cls=PublisherBatchFast) as pub:
            for i in range(N):
                pub.batch(b"r%07d" % i)
                if i % 1000 == 999:
                    await pub.flush()
            await pub.flush()
    finally:
        await c.disconnect()
    got = await _read(shared_broker, stream, Offset.FIRST, N)  # type: ignore[misc]  # rbfly's stub types FIRST per instance
    assert [o for o, _ in got] == list(range(N))
    assert [bytes(x) for _, x in got] == [b"r%07d" % i for i in range(N)]  # type: ignore[call-overload]


async def test_offset_and_deduplication(shared_broker: BrokerProcess) -> None:
    stream = "rbfly-dedup"
    c = client(shared_broker)
    try:
        await c.create_stream(stream)
        async with c.publisher(stream, name="rb-writer") as pub:
            for i in range(20):
                await pub.send(b"v%d" % i)
        # a second publisher with the same name continues after the stored sequence
        async with c.publisher(stream, name="rb-writer") as pub:
            assert pub.message_id == 21  # type: ignore[attr-defined]
            await pub.send(b"v20")
    finally:
        await c.disconnect()
    got = await _read(shared_broker, stream, Offset.offset(15), 6)
    assert got == [(15 + i, b"v%d" % (15 + i)) for i in range(6)]
