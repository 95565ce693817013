"""A super stream whose partitions have 3 members each, in a local cluster (`streamlet cluster
up`): created by rstream with ``initial-cluster-size`` as RabbitMQ clients send it, the
partitions' leaders spread across the nodes, every node answering Partitions and Route, a
partition's leader killed while rstream's super stream producer publishes, and a delete that
removes every partition's members."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from tests.cluster.test_local_cluster import HOST, Cluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

NAME = "orders"
PARTITIONS = [f"{NAME}-{i}" for i in range(3)]


@pytest.fixture
def cluster(tmp_path: Path) -> object:
    c = Cluster(tmp_path / "c", 3).start()
    yield c
    c.stop()


def _directory(cluster: Cluster) -> dict[str, Any]:
    try:
        return json.loads((cluster.data_dir / "directory.json").read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return {}


def _leaders(cluster: Cluster) -> dict[str, int] | None:
    """Each partition's leading node, once the driver's directory names all of them."""
    streams = _directory(cluster).get("streams", {})
    ports = cluster.ports()
    out = {}
    for p in PARTITIONS:
        leader = (streams.get(p) or {}).get("leader")
        if leader is None:
            return None
        out[p] = ports.index(int(leader.rpartition(":")[2]))
    return out


async def test_a_replicated_super_stream_spreads_its_leaders_and_survives_a_leader_kill(
        cluster: Cluster) -> None:
    from rstream import AMQPMessage, RouteType, SuperStreamCreationOption, SuperStreamProducer

    ports = cluster.ports()

    async def key(msg: AMQPMessage) -> str:
        return str(msg.application_properties["id"])

    async def publish(first: int, n: int) -> None:
        async with SuperStreamProducer(
            HOST, ports[1], username="guest", password="guest", super_stream=NAME,
            super_stream_creation_option=SuperStreamCreationOption(
                n_partitions=3, arguments={"initial-cluster-size": "3"}),
            routing_extractor=key, routing=RouteType.Hash,
        ) as producer:
            for i in range(first, first + n):
                await producer.send(AMQPMessage(body=b"o-%d" % i, application_properties={"id": i}))

    await publish(0, 150)  # created here: 3 partitions of 3 members each
    leaders = await eventually(lambda: _leaders(cluster), timeout=30,
                               what="the directory names each partition's leader")
    assert sorted(leaders.values()) == [0, 1, 2], f"one partition led by each node: {leaders}"
    for port in ports:  # every node answers for the super stream, from its record or the directory
        async with await connect(HOST, port) as c:
            assert await c.partitions(NAME) == PARTITIONS
            assert await c.route("1", NAME) == [f"{NAME}-1"]
        for p in PARTITIONS:  # and holds a member of every partition
            node = ports.index(port)
            assert (cluster.data_dir / f"node-{node}" / "streams" / p).is_dir()

    killed = leaders[PARTITIONS[0]]
    os.kill(cluster.state()["nodes"][killed]["pid"], signal.SIGKILL)
    await eventually(lambda: (_leaders(cluster) or {}).get(PARTITIONS[0]) not in (None, killed),
                     timeout=60, what="partition 0 led by another node")
    await publish(150, 150)  # rstream finds the new leaders by itself

    got: Counter[bytes] = Counter()
    reader_port = ports[(killed + 1) % 3]  # a node that never went down reads every partition

    async def read(partition: str) -> None:
        async with await connect(HOST, reader_port) as c:
            consumer = await c.consumer(partition, "first", credit=50)
            while sum(got.values()) < 300:
                record = await consumer.__anext__()
                found = re.search(rb"o-\d+$", bytes(record.body))  # the AMQP body's payload
                assert found is not None
                got[found.group()] += 1

    readers = [asyncio.create_task(read(p)) for p in PARTITIONS]
    try:
        await eventually(lambda: sum(got.values()) >= 300, timeout=60, what="300 messages read")
    finally:
        for t in readers:
            t.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    assert set(got) == {b"o-%d" % i for i in range(300)}
    assert max(got.values()) == 1, "each message once"


async def test_deleting_a_replicated_super_stream_deletes_every_member(cluster: Cluster) -> None:
    ports = cluster.ports()
    async with await connect(HOST, ports[0]) as c:
        await c.create_super_stream(NAME, PARTITIONS, ["0", "1", "2"],
                                    {"initial-cluster-size": "3"})
    await eventually(lambda: _leaders(cluster), timeout=30, what="the partitions' leaders")
    assert all((cluster.data_dir / f"node-{n}" / "streams" / p).is_dir()
               for n in range(3) for p in PARTITIONS)
    async with await connect(HOST, ports[0]) as c:
        await c.delete_super_stream(NAME)
    assert not any((cluster.data_dir / f"node-{n}" / "streams" / p).exists()
                   for n in range(3) for p in PARTITIONS), "every member deleted before the answer"
