"""Publishers declared on a follower are passed on to the stream's leader (as RabbitMQ takes a
publisher on any node): confirmed after the leader's commit, deduplicated by the leader, and
told MetadataUpdate 6 when the leader goes. Real broker processes on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.client.errors import StreamletError
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from tests.broker.test_replication import Factory, _stream_on_members, ask, segment_files
from tests.support.raw import RawPeer
from tests.support.waiting import eventually

pytestmark = pytest.mark.process


def ask_update(peer: RawPeer) -> Any:
    return peer.recv_until(f.MetadataUpdate)


async def _read(host: str, port: int, stream: str, n: int) -> list[bytes]:
    async with await connect(host, port) as reader:
        consumer = await reader.consumer(stream, "first", credit=50)
        got: list[bytes] = []
        while len(got) < n:
            got.append(bytes((await asyncio.wait_for(consumer.__anext__(), 30)).body))
        return got


async def test_a_publisher_on_a_follower_writes_through_the_leader(
        tmp_path: Path, broker_factory: Factory) -> None:
    brokers = await _stream_on_members("p", tmp_path, broker_factory)
    leader, follower = brokers[0], brokers[1]
    async with await connect(follower.host, follower.port) as client:
        producer = await client.producer("p", reference="app")
        await producer.send_many(b"m%d" % i for i in range(3000))
        await asyncio.wait_for(producer.flush(), 60)
        assert producer.unconfirmed == 0
        # the leader keeps the publisher's sequence: asked on the follower, it is forwarded
        assert await client.query_publisher_sequence("app", "p") == 3000
        await producer.close()

        again = await client.producer("p", reference="app")  # ids continue after 3000
        assert again.next_publishing_id == 3001
        await again.send(b"dup", publishing_id=17)  # a resent id: confirmed, not stored again
        await again.send(b"m3000")
        await asyncio.wait_for(again.flush(), 30)

    expected = [b"m%d" % i for i in range(3001)]
    for b in brokers:
        assert await _read(b.host, b.port, "p", 3001) == expected, f"member {b.port}"

    def identical() -> bool:
        files = [segment_files(b, "p") for b in brokers]
        return files[0] == files[1] == files[2] and bool(files[0])

    await eventually(identical, timeout=30, what="the members' files equal")
    assert leader.alive()


async def test_a_relayed_publisher_is_told_when_the_leader_goes(
        tmp_path: Path, broker_factory: Factory) -> None:
    brokers = await _stream_on_members("g", tmp_path, broker_factory)
    follower = brokers[2]
    with RawPeer(follower.host, follower.port) as peer:
        peer.handshake()
        answer = ask(peer, f.DeclarePublisher(peer.next_corr(), 7, "", "g"),
                              f.DeclarePublisherResponse)
        assert answer.code == Code.OK
        again = ask(peer, f.DeclarePublisher(peer.next_corr(), 7, "", "g"),
                             f.DeclarePublisherResponse)
        assert again.code == Code.PRECONDITION_FAILED, "a publisher id is taken once"
        brokers[0].kill()
        update = ask_update(peer)
        assert (update.code, update.stream) == (Code.STREAM_NOT_AVAILABLE, "g")
        # the connection stays; a fenced follower takes no new publisher
        brokers[1].kill()
        later = ask(peer, f.DeclarePublisher(peer.next_corr(), 8, "", "g"),
                             f.DeclarePublisherResponse)
        assert later.code == Code.STREAM_NOT_AVAILABLE


async def test_a_publish_for_the_relayed_publisher_after_the_leader_went_gets_code_6(
        tmp_path: Path, broker_factory: Factory) -> None:
    brokers = await _stream_on_members("h", tmp_path, broker_factory)
    async with await connect(brokers[1].host, brokers[1].port) as client:
        producer = await client.producer("h")
        await producer.send(b"one")
        await asyncio.wait_for(producer.flush(), 30)
        brokers[0].kill()
        with pytest.raises(StreamletError) as e:
            for _ in range(100):  # until the MetadataUpdate closed it
                await producer.send(b"late")
                await asyncio.wait_for(producer.flush(), 30)
        assert e.value.code == Code.STREAM_NOT_AVAILABLE
