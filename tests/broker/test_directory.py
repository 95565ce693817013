"""Two real brokers and a stream directory: a client told only broker A's address reaches the
streams broker B holds (rstream follows Metadata's leader), and the file is re-read on change."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)

from streamlet.client import connect
from streamlet.client.errors import StreamletError
from streamlet.rabbitmq import Code
from tests.support.brokers import BrokerProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]


def _directory_config(tmp_path: Path) -> tuple[Path, Path]:
    directory = tmp_path / "directory" / "streams.json"
    directory.parent.mkdir()
    directory.write_text("{}")
    config = tmp_path / "a.toml"
    config.write_text(f'[cluster]\ndirectory_file = "{directory}"\n')
    return config, directory


async def test_a_client_of_broker_a_uses_a_stream_on_broker_b(
        tmp_path: Path, broker_factory: Factory) -> None:
    config, directory = _directory_config(tmp_path)
    a, b = broker_factory(config=config), broker_factory(config=config)
    client_b = await connect(b.host, b.port)
    await client_b.create_stream("far")
    await client_b.create_super_stream("inv", ["inv-0", "inv-1"], ["0", "1"])
    await client_b.close()
    directory.write_text(json.dumps({
        "streams": {"far": f"127.0.0.1:{b.port}", "inv-0": f"127.0.0.1:{b.port}",
                    "inv-1": f"127.0.0.1:{b.port}", "stale": f"127.0.0.1:{a.port}"},
        "super_streams": {"inv": {"partitions": ["inv-0", "inv-1"], "binding_keys": ["0", "1"]}},
    }))

    client_a = await connect(a.host, a.port)
    try:
        async def far_on_b() -> dict[str, Any] | None:
            # the broker looks at the file's stat at most once a second: poll, never assume
            meta = await client_a.metadata(["far", "stale", "nowhere"])
            brokers = {x.reference: (x.host, x.port) for x in meta.brokers}
            codes = {m.stream: (m.code, brokers.get(m.leader)) for m in meta.streams}
            return codes if codes["far"] == (Code.OK, ("127.0.0.1", b.port)) else None
        codes = await eventually(far_on_b, timeout=15.0, what="broker A reads the directory")
        assert codes["stale"][0] == codes["nowhere"][0] == Code.STREAM_DOES_NOT_EXIST
        assert await client_a.partitions("inv") == ["inv-0", "inv-1"]
        assert await client_a.route("1", "inv") == ["inv-1"]
    finally:
        await client_a.close()

    async with Producer(a.host, a.port, username="guest", password="guest") as producer:
        for i in range(20):
            await producer.send_wait("far", AMQPMessage(body=f"m{i}".encode()))
    received: list[bytes] = []

    async def on_message(message: AMQPMessage, context: MessageContext) -> None:
        received.append(bytes(message.body))

    consumer = Consumer(a.host, a.port, username="guest", password="guest")
    await consumer.start()
    try:
        await consumer.subscribe("far", on_message, decoder=amqp_decoder, offset_specification=(
            ConsumerOffsetSpecification(OffsetType.FIRST, None)))

        async def all_in() -> bool:
            return len(received) >= 20
        await eventually(all_in, timeout=15.0, what="20 messages consumed through broker A's address")
    finally:
        await asyncio.wait_for(consumer.close(), 5)
    assert received == [f"m{i}".encode() for i in range(20)]
    client_b = await connect(b.host, b.port)
    try:  # the messages live on B, and A never had the stream
        assert (await client_b.stream_stats("far"))["committed_chunk_id"] >= 0
    finally:
        await client_b.close()
    assert "far" not in {p.name for p in (tmp_path / "broker0" / "data" / "streams").glob("*")}


async def test_the_directory_is_read_again_when_it_changes_and_a_bad_one_is_ignored(
        tmp_path: Path, broker_factory: Factory) -> None:
    config, directory = _directory_config(tmp_path)
    a = broker_factory(config=config)
    client = await connect(a.host, a.port)

    async def leader() -> tuple[int, str, int] | None:
        meta = await client.metadata(["s"])
        m = meta.streams[0]
        brokers = {x.reference: (x.host, x.port) for x in meta.brokers}
        return (m.code, *brokers[m.leader]) if m.code == Code.OK else None

    try:
        assert await leader() is None
        directory.write_text(json.dumps({"streams": {"s": "h1:1000"}}))
        assert await eventually(leader, timeout=15.0, what="the first directory read") == (Code.OK, "h1", 1000)
        directory.write_text("{not json")
        directory.write_text(json.dumps({"streams": {"s": "h2:2000"}}))
        assert await eventually(lambda: _changed(leader, "h1"), timeout=15.0, what="the second directory read") == (
            Code.OK, "h2", 2000)
        directory.write_text("{not json")
        await eventually(lambda: _logged(a, leader, "not JSON"), timeout=15.0, what="the bad file logged")
        assert await leader() == (Code.OK, "h2", 2000)  # the last good one
    finally:
        await client.close()


async def _changed(leader: Callable[[], Awaitable[Any]], old_host: str) -> Any:
    now = await leader()
    return now if now and now[1] != old_host else None


async def _logged(b: BrokerProcess, leader: Callable[[], Awaitable[Any]], text: str) -> bool:
    await leader()  # the file is looked at when a Metadata request needs it
    return text in b.log_text()


async def test_metadata_names_a_replicated_streams_leader_and_replicas(
        tmp_path: Path, broker_factory: Factory) -> None:
    """A replicated stream's entry (epoch, leader, replicas) is what Metadata answers, on every
    broker; while it is elected (leader null) the leader is 0xFFFF, which clients retry on."""
    config, directory = _directory_config(tmp_path)
    a = broker_factory(config=config)
    b1, b2 = f"127.0.0.1:{a.port + 1}", f"127.0.0.1:{a.port + 2}"
    directory.write_text(json.dumps({"streams": {
        "r": {"epoch": 2, "leader": b1, "replicas": [f"127.0.0.1:{a.port}", b2]},
        "electing": {"epoch": 3, "leader": None, "replicas": [b1]}}}))
    client = await connect(a.host, a.port)
    try:
        async def answered() -> Any:
            meta = await client.metadata(["r", "electing"])
            return meta if meta.streams[0].code == Code.OK else None

        meta = await eventually(answered, what="the directory read")
        brokers = {x.reference: (x.host, x.port) for x in meta.brokers}
        r, electing = meta.streams
        assert brokers[r.leader] == ("127.0.0.1", a.port + 1)
        assert [brokers[x] for x in r.replicas] == [("127.0.0.1", a.port), ("127.0.0.1", a.port + 2)]
        assert electing.code == Code.OK and electing.leader == 0xFFFF
    finally:
        await client.close()


async def test_a_stream_held_elsewhere_is_not_available_here_not_missing(
        tmp_path: Path, broker_factory: Factory) -> None:
    """Subscribe and DeclarePublisher on a broker without the stream answer 6 when the directory
    names where it is (as RabbitMQ answers for a stream without a local member: clients look it
    up again), and 2 for a stream nobody holds."""
    config, directory = _directory_config(tmp_path)
    a = broker_factory(config=config)
    directory.write_text(json.dumps({"streams": {"far": "127.0.0.1:1"}}))
    client = await connect(a.host, a.port)
    try:
        async def directory_read() -> bool:
            meta = await client.metadata(["far"])
            return meta.streams[0].code == Code.OK

        await eventually(directory_read, what="the directory read")
        for name, code in (("far", Code.STREAM_NOT_AVAILABLE), ("none", Code.STREAM_DOES_NOT_EXIST)):
            with pytest.raises(StreamletError) as e:
                await client.consumer(name)
            assert e.value.code == code, name
            with pytest.raises(StreamletError) as e:
                await client.producer(name)
            assert e.value.code == code, name
    finally:
        await client.close()
