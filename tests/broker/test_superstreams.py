"""Super streams with rstream's SuperStreamProducer/SuperStreamConsumer and streamlet's client:
create, route, partitions, delete (one MetadataUpdate per partition), and durability."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

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

from streamlet.client import StreamletError, connect
from streamlet.rabbitmq import Code
from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process

N = 300


async def test_rstream_super_stream_producer_and_consumer(shared_broker: BrokerProcess) -> None:
    b = shared_broker
    name = "orders-ss"

    async def key(msg: AMQPMessage) -> str:
        return str(msg.application_properties["id"])

    async with SuperStreamProducer(
        b.host, b.port, username="guest", password="guest", super_stream=name,
        super_stream_creation_option=SuperStreamCreationOption(n_partitions=3),
        routing_extractor=key, routing=RouteType.Hash,
    ) as producer:
        for i in range(N):
            await producer.send(AMQPMessage(body=b"order-%d" % i, application_properties={"id": i}))

    got: list[tuple[str, bytes]] = []
    done = asyncio.Event()

    async def on_message(msg: AMQPMessage, ctx) -> None:  # type: ignore[no-untyped-def]
        got.append((ctx.stream, bytes(msg.body)))
        if len(got) >= N:
            done.set()

    consumer = SuperStreamConsumer(b.host, b.port, username="guest", password="guest", super_stream=name)
    async with consumer:
        await consumer.subscribe(on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await asyncio.wait_for(done.wait(), 30)
    assert sorted(m for _, m in got) == sorted(b"order-%d" % i for i in range(N))
    per_partition = Counter(s for s, _ in got)
    assert set(per_partition) == {f"{name}-0", f"{name}-1", f"{name}-2"}  # hash spread them

    async with await connect(b.host, b.port) as c:
        assert await c.partitions(name) == [f"{name}-0", f"{name}-1", f"{name}-2"]
        # rstream's creation option uses the partition numbers as binding keys
        assert await c.route("1", name) == [f"{name}-1"]
        assert await c.route("nope", name) == []
        for partition, count in per_partition.items():
            stats = await c.stream_stats(partition)
            assert stats["last_chunk_id"] >= 0 and count > 0


async def test_create_route_delete_with_metadata_updates(shared_broker: BrokerProcess) -> None:
    b = shared_broker
    async with await connect(b.host, b.port) as c:
        await c.create_super_stream("invoices", ["invoices-eu", "invoices-us"], ["eu", "us"],
                                    {"max-age": "1h"})
        assert await c.route("us", "invoices") == ["invoices-us"]
        assert await c.route("asia", "invoices") == []
        for bad, why in ((lambda: c.create_super_stream("invoices", ["x-1"], ["1"]), Code.STREAM_ALREADY_EXISTS),
                         (lambda: c.create_super_stream("other", ["invoices-eu"], ["1"]), Code.STREAM_ALREADY_EXISTS),
                         (lambda: c.create_super_stream("other", ["o-1", "o-2"], ["k"]), Code.PRECONDITION_FAILED),
                         (lambda: c.create_super_stream("other", ["o-1", "o-2"], ["k", "k"]), Code.PRECONDITION_FAILED),
                         (lambda: c.create_super_stream("other", [], []), Code.PRECONDITION_FAILED)):
            await _expect_code(bad, why)
        await _expect_code(lambda: c.partitions("missing"), Code.STREAM_DOES_NOT_EXIST)
        await _expect_code(lambda: c.route("eu", "missing"), Code.STREAM_DOES_NOT_EXIST)

        # another connection holds a publisher on one partition and asked Metadata of the other
        async with await connect(b.host, b.port) as watcher:
            updates: list[tuple[str, int]] = []
            watcher.on_metadata_update = lambda stream, code: updates.append((stream, code))
            producer = await watcher.producer("invoices-eu")
            await producer.send(b"x")
            await watcher.metadata(["invoices-us"])
            await c.delete_super_stream("invoices")
            for _ in range(100):
                if len(updates) == 2:
                    break
                await asyncio.sleep(0.02)
            assert sorted(updates) == [("invoices-eu", 6), ("invoices-us", 6)]
        assert not await c.stream_exists("invoices-eu")
        await _expect_code(lambda: c.partitions("invoices"), Code.STREAM_DOES_NOT_EXIST)
        await _expect_code(lambda: c.delete_super_stream("invoices"), Code.STREAM_DOES_NOT_EXIST)


async def test_super_streams_survive_a_restart(broker: BrokerProcess) -> None:
    async with await connect(broker.host, broker.port) as c:
        await c.create_super_stream("durable", ["durable-a", "durable-b"], ["a", "b"])
    broker.kill()
    broker.start()
    async with await connect(broker.host, broker.port) as c:
        assert await c.partitions("durable") == ["durable-a", "durable-b"]
        assert await c.route("b", "durable") == ["durable-b"]
        assert await c.stream_exists("durable-a")


async def _expect_code(call: Callable[[], object], code: int) -> None:
    try:
        await call()  # type: ignore[misc]
    except StreamletError as e:
        assert e.code == code, e
    else:
        raise AssertionError(f"expected code {code}")


def test_cli_creates_lists_and_deletes_super_streams(shared_broker: BrokerProcess) -> None:
    import subprocess
    import sys

    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "streamlet", "streams", "--host", shared_broker.host,
                               "--port", str(shared_broker.port), *args],
                              capture_output=True, text=True, timeout=60, check=check)

    out = cli("create-super", "cli-ss", "--binding-keys", "eu,us", "--max-age", "1D").stdout
    assert out == "created super stream cli-ss: cli-ss-eu, cli-ss-us\n"
    assert cli("create-super", "cli-num", "--partitions", "2").returncode == 0
    out = cli("partitions", "cli-ss", "--keys", "us,asia").stdout
    assert out.splitlines() == ["cli-ss-eu", "cli-ss-us", "route us\tcli-ss-us", "route asia\t-"]
    assert cli("partitions", "cli-num").stdout.splitlines() == ["cli-num-0", "cli-num-1"]
    assert cli("delete-super", "cli-ss").returncode == 0
    missing = cli("partitions", "cli-ss", check=False)
    assert missing.returncode == 1 and "STREAM_DOES_NOT_EXIST" in missing.stderr


async def test_deleting_a_partition_unbinds_it(broker: BrokerProcess) -> None:
    async with await connect(broker.host, broker.port) as c:
        await c.create_super_stream("shrink", ["shrink-a", "shrink-b"], ["a", "b"])
        await c.delete_stream("shrink-a")
        assert await c.partitions("shrink") == ["shrink-b"]
        assert await c.route("a", "shrink") == []
    broker.restart()  # not re-created at start: only a partition lost in a crash is
    async with await connect(broker.host, broker.port) as c:
        assert await c.partitions("shrink") == ["shrink-b"]
        assert not await c.stream_exists("shrink-a")
