"""A super stream's partitions through MEGA, checked with rstream on a real broker: messages
rstream's SuperStreamProducer routed are read through MEGA at the offsets and with the bytes
rstream reads; a message MEGA produces into a partition gets that partition's next offset and
reaches rstream's SuperStreamConsumer from that partition. A partition is a stream: MEGA names
it as its topic (MEGA knows nothing of super streams, routing or binding keys)."""

from __future__ import annotations

import pytest
from rstream import (
    AMQPMessage,
    ConsumerOffsetSpecification,
    OffsetType,
    RouteType,
    SuperStreamConsumer,
    SuperStreamCreationOption,
    SuperStreamProducer,
    amqp_decoder,
)

from streamlet.client.mega import MegaClient, MegaError
from streamlet.mega import ErrorCode
from tests.broker.test_rstream import consume as rstream_consume
from tests.mega.test_mega import MegaBroker, mega_broker  # noqa: F401 (the module's broker)
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

SUPER = "m-super"
PARTITIONS = [f"{SUPER}-{i}" for i in range(3)]
N = 90


async def _route_by_id(msg: AMQPMessage) -> str:
    return str(msg.application_properties["id"])


async def read_partition(c: MegaClient, topic: str) -> list[tuple[int, bytes]]:
    """Every committed message of ``topic`` through MEGA, from offset 0 to INVALID_OFFSET."""
    out: list[tuple[int, bytes]] = []
    while True:
        try:
            _, body = await c.consume(topic, len(out))
        except MegaError as e:
            assert e.code == ErrorCode.INVALID_OFFSET
            return out
        out.append((len(out), body))


async def test_a_super_stream_partition_through_mega(mega_broker: MegaBroker) -> None:  # noqa: F811
    b = mega_broker
    async with SuperStreamProducer(b.host, b.port, username="guest", password="guest",
                                   super_stream=SUPER, routing=RouteType.Hash,
                                   routing_extractor=_route_by_id,
                                   super_stream_creation_option=SuperStreamCreationOption(
                                       n_partitions=3)) as producer:
        for i in range(N):
            await producer.send(AMQPMessage(body=b"ss-%d" % i, application_properties={"id": i}))

    async with await MegaClient.connect(b.host, b.mega_port) as c:
        async def all_routed() -> dict[str, list[tuple[int, bytes]]] | None:
            got = {p: await read_partition(c, p) for p in PARTITIONS}
            return got if sum(map(len, got.values())) >= N else None
        through_mega = await eventually(all_routed, 30, "every routed message committed")
        # each partition through MEGA: rstream's offsets and bytes (AMQP 1.0 messages as stored)
        for p in PARTITIONS:
            want = await rstream_consume(b, p, ConsumerOffsetSpecification(OffsetType.FIRST),
                                         len(through_mega[p]))
            assert through_mega[p] == want
        bodies = sorted(amqp_decoder(x).body for got in through_mega.values() for _, x in got)
        assert bodies == sorted(b"ss-%d" % i for i in range(N))
        assert all(through_mega.values()), "hash routing spread 90 ids over every partition"

        # MEGA produces into one partition: its next offset there, seen by rstream
        target = PARTITIONS[1]
        before = len(through_mega[target])
        sent = [bytes(AMQPMessage(body=b"from-mega-%d" % i)) for i in range(3)]
        offsets = [await c.produce(target, x) for x in sent]
        assert offsets == [before, before + 1, before + 2]
        assert await read_partition(c, target) == [*through_mega[target],
                                                  *zip(offsets, sent, strict=True)]

    got: list[tuple[str, int, bytes]] = []

    async def on_message(msg: AMQPMessage, ctx) -> None:  # type: ignore[no-untyped-def]
        got.append((ctx.stream, ctx.offset, bytes(msg.body)))

    consumer = SuperStreamConsumer(b.host, b.port, username="guest", password="guest",
                                   super_stream=SUPER)
    await consumer.start()
    try:
        await consumer.subscribe(on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await eventually(lambda: len(got) >= N + 3, 30, "the super stream read whole")
    finally:
        await consumer.close()
    assert sorted(x for x in got if x[2].startswith(b"from-mega")) == [
        (target, off, b"from-mega-%d" % i) for i, off in enumerate(offsets)]
    assert len(got) == N + 3
