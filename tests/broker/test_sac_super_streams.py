"""Single active consumers on a super stream with rstream, as rstream's own suite runs them:
SuperStreamProducer routing by hash, SuperStreamConsumers of one group subscribing every
partition with ``single-active-consumer``, ``name`` and ``super-stream``.

RabbitMQ's rule: partition i is served by member i % n of its group, in order of arrival; a
change first tells the serving consumer ConsumerUpdate(active=0), and the next one is activated
once that answer is in (or at once when the serving one left)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable

import pytest
from rstream import (
    AMQPMessage,
    ConsumerOffsetSpecification,
    EventContext,
    OffsetNotFound,
    OffsetSpecification,
    OffsetType,
    RouteType,
    SuperStreamConsumer,
    SuperStreamCreationOption,
    SuperStreamProducer,
    amqp_decoder,
)
from rstream import Producer as RProducer

from tests.support.brokers import BrokerProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

N = 10_000
GROUP = "grp"

Listener = Callable[[bool, EventContext], Awaitable[OffsetSpecification]]
#: where each consumer starts: the Subscribe offset and what its ConsumerUpdate listener answers
#: ("default": no listener, rstream answers `next` itself, whatever the subscription said)
STARTS: dict[str, tuple[OffsetType, int | None]] = {
    "default": (OffsetType.FIRST, None),
    "next": (OffsetType.NEXT, None),
    "first": (OffsetType.FIRST, None),
    "offset": (OffsetType.OFFSET, 0),
}


async def _route_by_id(msg: AMQPMessage) -> str:
    return str(msg.application_properties["id"])


def _props(super_stream: str) -> dict[str, str]:
    return {"single-active-consumer": "true", "name": GROUP, "super-stream": super_stream}


class Group:
    """SuperStreamConsumers of one group, and what each received: (partition, body)."""

    def __init__(self, b: BrokerProcess, super_stream: str) -> None:
        self.b = b
        self.super_stream = super_stream
        self.consumers: dict[str, SuperStreamConsumer] = {}
        self.got: dict[str, list[tuple[str, bytes]]] = defaultdict(list)
        #: (consumer, partition, active) in the order the ConsumerUpdates reached the listeners
        self.updates: list[tuple[str, str, bool]] = []
        #: off once the test is over: closing the consumers hands partitions over again
        self.recording = True

    async def join(self, who: str, start: tuple[OffsetType, int | None],
                   listener: Listener | None = None, store: bool = False) -> None:
        consumer = SuperStreamConsumer(self.b.host, self.b.port, username="guest", password="guest",
                                       super_stream=self.super_stream)
        self.consumers[who] = consumer
        await consumer.start()

        async def on_message(msg: AMQPMessage, ctx) -> None:  # type: ignore[no-untyped-def]
            if not self.recording:
                return
            self.got[who].append((ctx.stream, bytes(msg.body)))
            if store:
                await ctx.consumer.store_offset(ctx.stream, GROUP, ctx.offset)

        async def on_update(is_active: bool, ctx: EventContext) -> OffsetSpecification:
            if self.recording:
                self.updates.append((who, ctx.stream, is_active))
            assert listener is not None
            return await listener(is_active, ctx)

        await consumer.subscribe(on_message, decoder=amqp_decoder, properties=_props(self.super_stream),
                                 subscriber_name=GROUP, offset_specification=ConsumerOffsetSpecification(*start),
                                 consumer_update_listener=on_update if listener else None)

    async def leave(self, who: str) -> None:
        await self.consumers.pop(who).close()

    async def close(self) -> None:
        self.recording = False
        for consumer in self.consumers.values():
            await consumer.close()

    def ids(self) -> list[int]:
        return [int(body[1:]) for got in self.got.values() for _, body in got if body.startswith(b"m")]

    def owners(self, partition: str, body_prefix: bytes = b"") -> set[str]:
        return {who for who, got in self.got.items()
                for stream, body in got if stream == partition and body.startswith(body_prefix)}


async def _every_partition_delivers(g: Group, partitions: list[str], marker: bytes) -> None:
    """Publish ``marker`` straight to every partition until each one's has been received. A
    marker stored before its consumer's activation answer is skipped by a `next` answer, as
    RabbitMQ skips it, so the ones not seen yet are sent again."""
    async with RProducer(g.b.host, g.b.port, username="guest", password="guest") as direct:
        async def delivered() -> bool:
            seen = {stream for got in g.got.values() for stream, body in got if body == marker}
            for partition in partitions:
                if partition not in seen:
                    await direct.send_wait(partition, AMQPMessage(body=marker))
            return seen == set(partitions)
        await eventually(delivered, 60, f"{marker!r} received from every partition")


def _answer(start: tuple[OffsetType, int | None]) -> Listener:
    async def listener(is_active: bool, ctx: EventContext) -> OffsetSpecification:
        return OffsetSpecification(start[0], start[1] or 0)
    return listener


@pytest.mark.parametrize("start", list(STARTS))
async def test_each_consumer_gets_one_partition_and_every_message(shared_broker: BrokerProcess,
                                                                  start: str) -> None:
    """Three consumers of one group on a 3-partition super stream, then 10,000
    messages routed over the partitions: every message arrives once, each partition is served
    by one consumer and each consumer serves one partition (member i serves partition i)."""
    b = shared_broker
    name = f"sac-ss-{start}"
    partitions = [f"{name}-{i}" for i in range(3)]
    spec = STARTS[start]
    g = Group(b, name)
    async with SuperStreamProducer(b.host, b.port, username="guest", password="guest", super_stream=name,
                                   super_stream_creation_option=SuperStreamCreationOption(n_partitions=3),
                                   routing_extractor=_route_by_id, routing=RouteType.Hash) as producer:
        try:
            for who in "abc":
                await g.join(who, spec, None if start == "default" else _answer(spec))
            await _every_partition_delivers(g, partitions, b"ready")
            for i in range(N):
                await producer.send(AMQPMessage(body=b"m%d" % i, application_properties={"id": i}))
            await eventually(lambda: len(g.ids()) >= N, 60, "every message received")
        finally:
            await g.close()
    assert sorted(g.ids()) == list(range(N))  # each exactly once
    assert [g.owners(p) for p in partitions] == [{"a"}, {"b"}, {"c"}]
    assert all(len(g.owners(p, b"m")) == 1 for p in partitions)
    if start != "default":  # a partition changes hands only after its consumer stepped down
        for p, who in ((partitions[1], "b"), (partitions[2], "c")):
            assert g.updates.index(("a", p, False)) < g.updates.index((who, p, True))


async def _resume_from_stored_offset(is_active: bool, ctx: EventContext) -> OffsetSpecification:
    """What a consumer that tracks its offsets answers: after the group's stored offset."""
    if not is_active:
        return OffsetSpecification(OffsetType.NEXT, 0)
    try:
        stored = await ctx.consumer.query_offset(ctx.stream, GROUP)
    except OffsetNotFound:
        return OffsetSpecification(OffsetType.FIRST, 0)
    return OffsetSpecification(OffsetType.OFFSET, stored + 1)


async def test_consumers_leave_and_join_while_messages_flow(shared_broker: BrokerProcess) -> None:
    """The group changes under load: a consumer leaves (its partitions move to the remaining
    members by the rule, the new one resumes after the stored offset), one joins (rebalance).
    Nothing is lost: every message reaches a consumer. What the one stepping down still had in
    flight after its last stored offset reaches the next one again (RabbitMQ's at-least-once),
    but never the same consumer twice. Every partition ends with the member the rule names."""
    b = shared_broker
    name = "sac-ss-churn"
    partitions = [f"{name}-{i}" for i in range(3)]
    total = 3 * N
    g = Group(b, name)
    start = (OffsetType.FIRST, None)
    async with SuperStreamProducer(b.host, b.port, username="guest", password="guest", super_stream=name,
                                   super_stream_creation_option=SuperStreamCreationOption(n_partitions=3),
                                   routing_extractor=_route_by_id, routing=RouteType.Hash) as producer:

        async def publish() -> None:
            for i in range(total):
                await producer.send(AMQPMessage(body=b"m%d" % i, application_properties={"id": i}))
                if i % 500 == 0:
                    await asyncio.sleep(0.05)  # a steady flow, not one burst

        def received_past(count: int) -> Callable[[], bool]:
            return lambda: len(set(g.ids())) >= count

        task: asyncio.Task[None] | None = None
        try:
            for who in "abc":
                await g.join(who, start, _resume_from_stored_offset, store=True)
            await _every_partition_delivers(g, partitions, b"ready")
            task = asyncio.create_task(publish())
            await eventually(received_past(total // 4), 60, "a quarter received")
            # b leaves: [a, c] -> partition 1 to c (b was serving it), partition 2 from c to a
            await g.leave("b")
            await eventually(received_past(total // 2), 60, "half received")
            # d joins: [a, c, d] -> partition 2 from a to d
            await g.join("d", start, _resume_from_stored_offset, store=True)
            await task
            await eventually(received_past(total), 60, "every message received")
            # who serves each partition now: a marker published after all the changes
            await _every_partition_delivers(g, partitions, b"end")
        finally:
            if task is not None and not task.done():
                task.cancel()
            await g.close()
    ids = g.ids()
    assert set(ids) == set(range(total)), f"lost: {sorted(set(range(total)) - set(ids))[:20]}"
    for who, got in g.got.items():
        mine = [body for _, body in got if body.startswith(b"m")]
        assert len(mine) == len(set(mine)), f"{who} got {len(mine) - len(set(mine))} twice"
    assert [g.owners(p, b"end") for p in partitions] == [{"a"}, {"c"}, {"d"}]
    assert ("b", partitions[1], True) in g.updates and ("c", partitions[1], True) in g.updates
    # partition 2: c, stepped down when b left; a, stepped down when d joined; then d
    p2 = [(who, active) for who, p, active in g.updates if p == partitions[2]]
    assert p2[-5:] == [("c", True), ("c", False), ("a", True), ("a", False), ("d", True)], p2
