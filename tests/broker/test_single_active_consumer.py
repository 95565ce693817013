"""Single active consumer with rstream: one consumer of a group receives, the next one takes
over (from the offset its ConsumerUpdate answer names) when the active one goes away."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest
from rstream import Consumer as RConsumer
from rstream import (
    ConsumerOffsetSpecification,
    EventContext,
    OffsetSpecification,
    OffsetType,
    RawMessage,
    SuperStreamConsumer,
)
from rstream import Producer as RProducer

from streamlet.client import StreamletError, connect
from streamlet.rabbitmq import Code
from tests.support.brokers import BrokerProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

SAC = {"single-active-consumer": "true", "name": "billing"}


async def _publish(b: BrokerProcess, stream: str, bodies: list[bytes]) -> None:
    async with RProducer(b.host, b.port, username="guest", password="guest") as p:
        await p.send_batch(stream, [RawMessage(x) for x in bodies])


async def test_rstream_single_active_consumer_failover(shared_broker: BrokerProcess) -> None:
    b = shared_broker
    stream = "sac-failover"
    async with RProducer(b.host, b.port, username="guest", password="guest") as p:
        await p.create_stream(stream)
    await _publish(b, stream, [b"a%d" % i for i in range(100)])

    got: dict[str, list[int]] = {"A": [], "B": []}
    bodies: dict[str, list[bytes]] = {"A": [], "B": []}
    activations: list[tuple[str, bool]] = []

    def listener(who: str):  # type: ignore[no-untyped-def]
        async def on_update(is_active: bool, ctx: EventContext) -> OffsetSpecification:
            activations.append((who, is_active))
            stored = None
            with contextlib.suppress(Exception):  # no offset stored yet
                stored = await ctx.consumer.query_offset(stream, "billing")
            if stored is None:
                return OffsetSpecification(OffsetType.FIRST, 0)
            return OffsetSpecification(OffsetType.OFFSET, stored + 1)
        return on_update

    def on_message(who: str):  # type: ignore[no-untyped-def]
        async def handle(msg: bytes, ctx) -> None:  # type: ignore[no-untyped-def]
            got[who].append(ctx.offset)
            bodies[who].append(msg)
        return handle

    a = RConsumer(b.host, b.port, username="guest", password="guest")
    bc = RConsumer(b.host, b.port, username="guest", password="guest")
    await a.start()
    await bc.start()
    try:
        await a.subscribe(stream, on_message("A"), decoder=lambda x: x, properties=dict(SAC),
                          subscriber_name="billing", consumer_update_listener=listener("A"),
                          offset_specification=ConsumerOffsetSpecification(OffsetType.NEXT))
        await eventually(lambda: len(got["A"]) == 100, what="A gets the first 100")
        await a.store_offset(stream, "billing", got["A"][-1])

        await bc.subscribe(stream, on_message("B"), decoder=lambda x: x, properties=dict(SAC),
                           subscriber_name="billing", consumer_update_listener=listener("B"),
                           offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await _publish(b, stream, [b"b%d" % i for i in range(50)])
        await eventually(lambda: len(got["A"]) == 150, what="A gets 50 more")
        await a.store_offset(stream, "billing", got["A"][-1])
        assert got["B"] == []  # passive: nothing, although it subscribed at "first"
        assert activations == [("A", True)]

        await a.close()  # the active consumer's connection goes away
        await eventually(lambda: ("B", True) in activations, what="B is activated")
        await _publish(b, stream, [b"c%d" % i for i in range(50)])
        await eventually(lambda: len(got["B"]) >= 50, what="B takes over")
        await asyncio.sleep(0.2)  # the scenario: room for a duplicate to follow, none may
        # B started where A's stored offset said, not at its own "first"
        assert bodies["B"] == [b"c%d" % i for i in range(50)]
        assert bodies["A"] == [b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(50)]
    finally:
        await bc.close()
        await a.close()


async def test_unsubscribe_hands_over_and_name_is_required(shared_broker: BrokerProcess) -> None:
    b = shared_broker
    async with await connect(b.host, b.port) as c:
        await c.create_stream("sac-raw")
        producer = await c.producer("sac-raw")
        for i in range(10):
            await producer.send(b"m%d" % i)
        try:
            await c.consumer("sac-raw", properties={"single-active-consumer": "true"})
        except StreamletError as e:
            assert e.code == Code.PRECONDITION_FAILED
        else:
            raise AssertionError("a single active consumer without a name was accepted")

        # streamlet's client answers ConsumerUpdate with its own spec (no offset stored for g)
        first = await c.consumer("sac-raw", "first", name="g", properties={"single-active-consumer": "true"})
        async with await connect(b.host, b.port) as c2:
            second = await c2.consumer("sac-raw", 5, name="g", properties={"single-active-consumer": "true"})
            m = await asyncio.wait_for(anext(first), 10)
            assert m.offset == 0
            await first.close()  # Unsubscribe: the next in line becomes active
            m = await asyncio.wait_for(anext(second), 10)
            assert m.offset == 5


async def test_super_stream_partitions_spread_over_a_group(shared_broker: BrokerProcess) -> None:
    """RabbitMQ's rule: partition i's active consumer is member i % n, in order of arrival."""
    b = shared_broker
    name = "sac-ss"
    async with await connect(b.host, b.port) as c:
        await c.create_super_stream(name, [f"{name}-0", f"{name}-1", f"{name}-2"], ["0", "1", "2"])
    props = {"single-active-consumer": "true", "name": "grp", "super-stream": name}
    updates: list[tuple[str, str, bool]] = []
    got: dict[str, set[str]] = {"one": set(), "two": set()}

    def listener(who: str):  # type: ignore[no-untyped-def]
        async def on_update(is_active: bool, ctx: EventContext) -> OffsetSpecification:
            updates.append((who, ctx.stream, is_active))
            return OffsetSpecification(OffsetType.NEXT, 0)
        return on_update

    def on_message(who: str):  # type: ignore[no-untyped-def]
        async def handle(msg: bytes, ctx) -> None:  # type: ignore[no-untyped-def]
            got[who].add(ctx.stream)
        return handle

    consumers = {who: SuperStreamConsumer(b.host, b.port, username="guest", password="guest",
                                          super_stream=name) for who in ("one", "two")}
    try:
        await consumers["one"].start()
        await consumers["one"].subscribe(on_message("one"), decoder=lambda x: x, properties=dict(props),
                                         subscriber_name="grp", consumer_update_listener=listener("one"))
        await eventually(lambda: len(updates) == 3, what="one is active on every partition")
        await consumers["two"].start()
        await consumers["two"].subscribe(on_message("two"), decoder=lambda x: x, properties=dict(props),
                                         subscriber_name="grp", consumer_update_listener=listener("two"))
        # partition 1 moves: one steps down first, then two is activated
        await eventually(lambda: ("two", f"{name}-1", True) in updates, what="two takes partition 1")
        assert updates.index(("one", f"{name}-1", False)) < updates.index(("two", f"{name}-1", True))
        assert not any(who == "two" and s != f"{name}-1" for who, s, _ in updates)

        async with await connect(b.host, b.port) as c:
            for p in range(3):
                producer = await c.producer(f"{name}-{p}")
                await producer.send(b"x")
                await producer.close()
        await eventually(lambda: len(got["one"]) == 2 and len(got["two"]) == 1, what="deliveries")
        assert got == {"one": {f"{name}-0", f"{name}-2"}, "two": {f"{name}-1"}}

        await consumers["two"].close()  # partition 1 goes back to one
        await eventually(lambda: updates.count(("one", f"{name}-1", True)) == 2, what="one takes partition 1 back")
    finally:
        for consumer in consumers.values():
            await consumer.close()


async def test_a_consumer_that_never_steps_down_is_closed_and_its_partition_moves_on(
        tmp_path: Path, broker_factory: Callable[..., BrokerProcess]) -> None:
    """rstream sends no answer when a ConsumerUpdate listener raises. A consumer told to step
    down that never answers would hold its partition forever; as RabbitMQ does, the broker
    closes its connection after server.request_timeout, and the partition goes on to the
    consumer the group chose."""
    config = tmp_path / "broker.toml"
    config.write_text("[server]\nrequest_timeout = 2\n")
    b = broker_factory(config=config)
    name = "sac-stuck"
    partitions = [f"{name}-0", f"{name}-1", f"{name}-2"]
    async with await connect(b.host, b.port) as c:
        await c.create_super_stream(name, partitions, ["0", "1", "2"])
    props = {"single-active-consumer": "true", "name": "grp", "super-stream": name}
    got: set[str] = set()

    async def stubborn(is_active: bool, ctx: EventContext) -> OffsetSpecification:
        if not is_active:
            raise RuntimeError("this listener fails when told to step down")
        return OffsetSpecification(OffsetType.FIRST, 0)

    async def willing(is_active: bool, ctx: EventContext) -> OffsetSpecification:
        return OffsetSpecification(OffsetType.FIRST, 0)

    async def on_message(msg: bytes, ctx) -> None:  # type: ignore[no-untyped-def]
        got.add(ctx.stream)

    one = SuperStreamConsumer(b.host, b.port, username="guest", password="guest", super_stream=name)
    two = SuperStreamConsumer(b.host, b.port, username="guest", password="guest", super_stream=name)
    try:
        await one.start()
        await one.subscribe(lambda msg, ctx: None, decoder=lambda x: x, properties=dict(props),
                            subscriber_name="grp", consumer_update_listener=stubborn)
        await two.start()
        await two.subscribe(on_message, decoder=lambda x: x, properties=dict(props),
                            subscriber_name="grp", consumer_update_listener=willing)
        async with await connect(b.host, b.port) as c:
            for p in partitions:
                producer = await c.producer(p)
                await producer.send(b"x")
                await producer.close()
        # `one` never answers its step-down on partition 1: once it is closed, `two` is the
        # group's only member and serves every partition, from the first message
        await eventually(lambda: got == set(partitions), 60, "two serves every partition")
        assert "ConsumerUpdate" in b.log_path.read_text() and "unanswered" in b.log_path.read_text()
    finally:
        for consumer in (one, two):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.close(), 10)
