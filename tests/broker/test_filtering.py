"""Stream filtering with rstream and rbfly: Publish v2 filter values, a bloom filter per chunk,
and subscriptions that only receive the chunks that may hold their values."""

from __future__ import annotations

import asyncio

import pytest
from rbfly.streams import MessageFilter, Offset, PublisherBatchFast, streams_client
from rstream import (
    AMQPMessage,
    ConfirmationStatus,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    OffsetType,
    amqp_decoder,
)
from rstream import Consumer as RConsumer
from rstream import Producer as RProducer

from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process


async def _region(msg: AMQPMessage) -> str:
    return str(msg.application_properties["region"])


async def _send_chunk(p: RProducer, stream: str, msgs: list[AMQPMessage]) -> None:
    """Send and wait for every confirm, so the next send starts a new chunk."""
    left = len(msgs)
    done = asyncio.Event()

    async def confirmed(status: ConfirmationStatus) -> None:
        nonlocal left
        left -= 1
        if left == 0:
            done.set()

    await p.send_batch(stream, msgs, on_publish_confirm=confirmed)
    await asyncio.wait_for(done.wait(), 20)


def _msgs(tag: str, region: str | None, n: int) -> list[AMQPMessage]:
    props = {"region": region} if region is not None else {}
    return [AMQPMessage(body=f"{tag}{i}".encode(), application_properties=props) for i in range(n)]


async def _consume(b: BrokerProcess, stream: str, filt: FilterConfiguration, until: bytes) -> list[bytes]:
    got: list[bytes] = []
    done = asyncio.Event()

    async def on_message(msg: AMQPMessage, ctx) -> None:  # type: ignore[no-untyped-def]
        got.append(bytes(msg.body))
        if got[-1] == until:
            done.set()

    async with RConsumer(b.host, b.port, username="guest", password="guest") as c:
        await c.subscribe(stream, on_message, decoder=amqp_decoder, filter_input=filt,
                          offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await asyncio.wait_for(done.wait(), 20)
    return got


async def test_rstream_filtering(shared_broker: BrokerProcess) -> None:
    b = shared_broker
    stream = "filter-rstream"
    async with RProducer(b.host, b.port, username="guest", password="guest",
                         filter_value_extractor=_region) as p, \
            RProducer(b.host, b.port, username="guest", password="guest") as plain:
        await p.create_stream(stream)
        await _send_chunk(p, stream, _msgs("eu", "eu", 20))        # chunk A: eu only
        await _send_chunk(p, stream, _msgs("us", "us", 20))        # chunk B: us only
        await _send_chunk(plain, stream, _msgs("none", None, 20))  # chunk C: Publish v1, no bloom
        await _send_chunk(p, stream, _msgs("mixed-eu", "eu", 10) + _msgs("mixed-asia", "asia", 10))
        await _send_chunk(p, stream, _msgs("end", "eu", 1))        # chunk E: eu, the marker

    def bodies(*groups: tuple[str, int]) -> list[bytes]:
        return [f"{tag}{i}".encode() for tag, n in groups for i in range(n)]

    # chunks B and C cannot hold "eu": never sent (the client does not post-filter here)
    got = await _consume(b, stream, FilterConfiguration(["eu"]), b"end0")
    assert got == bodies(("eu", 20), ("mixed-eu", 10), ("mixed-asia", 10), ("end", 1))

    # match-unfiltered adds chunks without any filter value
    got = await _consume(b, stream, FilterConfiguration(["eu"], match_unfiltered=True), b"end0")
    assert got == bodies(("eu", 20), ("none", 20), ("mixed-eu", 10), ("mixed-asia", 10), ("end", 1))

    # with a predicate the client removes the other values of a matching chunk
    got = await _consume(b, stream, FilterConfiguration(
        ["asia", "eu"], predicate=lambda m: m.application_properties[b"region"] != b"eu"), b"mixed-asia9")
    assert got == bodies(("mixed-asia", 10))


async def test_rbfly_filtering(shared_broker: BrokerProcess) -> None:
    b = shared_broker
    stream = "filter-rbfly"
    client = streams_client(f"rabbitmq-stream://guest:guest@{b.host}:{b.port}")

    def region(ctx) -> str:  # type: ignore[no-untyped-def]
        return bytes(ctx.body).split(b"-")[0].decode()

    try:
        await client.create_stream(stream)
        async with client.publisher(stream, cls=PublisherBatchFast, filter_extract=region) as pub:
            for tag, n in (("eu", 30), ("us", 30), ("eu", 5)):
                for i in range(n):
                    pub.batch(f"{tag}-{i}".encode())
                await pub.flush()  # one chunk per flush

        seen: list[str] = []

        def counting_region(ctx) -> str:  # type: ignore[no-untyped-def]
            seen.append(region(ctx))  # rbfly calls this for every message it receives
            return seen[-1]

        async def read(filt: MessageFilter | None, count: int) -> list[bytes]:
            got: list[bytes] = []

            async def run() -> None:
                first = Offset.FIRST  # type: ignore[misc]  # rbfly's stub types FIRST per instance
                async for body in client.subscribe(stream, offset=first, filter=filt):
                    assert isinstance(body, bytes)
                    got.append(body)
                    if len(got) >= count:
                        return
            await asyncio.wait_for(run(), 20)
            return got

        got = await read(MessageFilter(counting_region, {"us"}), 30)
        assert got == [f"us-{i}".encode() for i in range(30)]
        assert set(seen) == {"us"}  # the broker never sent the eu chunks
        # no filter: rbfly subscribes with match-unfiltered and receives everything
        got = await read(None, 65)
        assert len(got) == 65 and got[0] == b"eu-0" and got[-1] == b"eu-4"
    finally:
        await client.disconnect()
