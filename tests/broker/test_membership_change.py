"""A member set change on real member brokers, driven by the drivers' own code (the elector's
Members.learn, join and leave) without a driver: a learner catches up without its acks
counting, joins in the next epoch (then its acks count and the set of four needs three), a
member removed drops its copy, and the members end byte-identical with every message."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from streamlet.client import connect
from streamlet.driver.elector import Members, join
from streamlet.rabbitmq import Code
from streamlet.rabbitmq.frames import replication as rf
from tests.broker.test_replication import Factory, _admin, _members, assign, segment_files
from tests.support.brokers import BrokerProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.process


def _signal(broker: BrokerProcess, sig: signal.Signals) -> None:
    assert broker.proc is not None
    broker.proc.send_signal(sig)


async def test_a_member_added_then_another_removed(tmp_path: Path,
                                                   broker_factory: Factory) -> None:
    brokers = _members(tmp_path, broker_factory, 4)
    for b in brokers[:3]:
        async with await connect(b.host, b.port) as c:
            await c.create_stream("m", {"max-length-bytes": "50000000"})
    assign(brokers[:3], "m", 1, leader=0, ids=[0, 1, 2])
    driver = Members(lambda m: (brokers[m].host, brokers[m].port))

    async def yes(epoch: int) -> bool:
        return True

    async with await connect(brokers[0].host, brokers[0].port) as client:
        producer = await client.producer("m", reference="app")
        await producer.send_many(b"a%d" % i for i in range(3000))
        await asyncio.wait_for(producer.flush(), 60)

        # a learner: the stream made on member 3 with the leader's settings, following epoch 1
        assert await driver.learn(0, "m", 1, 3)
        leader = await driver.contact(0, "m")
        assert leader is not None and leader.tail is not None
        target = leader.tail.chunk_id

        async def caught_up() -> bool:
            c = await driver.contact(3, "m")
            return (c is not None and c.following and c.epoch == 1 and c.tail is not None
                    and c.tail.chunk_id >= target)
        await eventually(caught_up, 60, "the learner caught up")
        assert await driver.learn(0, "m", 1, 1) is False, "a member is no learner"

        # its acks do not count: with members 1 and 2 stopped nothing is confirmed
        for b in brokers[1:3]:
            _signal(b, signal.SIGSTOP)
        try:
            await producer.send(b"held")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(producer.flush(), 2)
        finally:
            for b in brokers[1:3]:
                _signal(b, signal.SIGCONT)
        await asyncio.wait_for(producer.flush(), 60)

        # joined in epoch 2: four members, a majority is three, the new one counts
        outcome = await join("m", [0, 1, 2, 3], 1, 0, yes, driver)
        assert outcome.assigned == [0, 1, 2, 3]
        await producer.send(b"joined")
        await asyncio.wait_for(producer.flush(), 60)
        _signal(brokers[1], signal.SIGSTOP)
        try:
            await producer.send(b"three of four")
            await asyncio.wait_for(producer.flush(), 60)  # 0, 2 and 3
            _signal(brokers[2], signal.SIGSTOP)
            try:
                await producer.send(b"two of four")
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(producer.flush(), 2)
            finally:
                _signal(brokers[2], signal.SIGCONT)
            await asyncio.wait_for(producer.flush(), 60)
        finally:
            _signal(brokers[1], signal.SIGCONT)

        # member 1 removed in epoch 3, then told to leave: its copy is gone
        assert await driver.leave(2, "m", 2) is False, "a member of that epoch stays"
        outcome = await join("m", [0, 2, 3], 2, 0, yes, driver)
        assert outcome.assigned == [0, 2, 3]
        assert await driver.leave(0, "m", 3) is False, "the leader never leaves"
        assert await driver.leave(1, "m", 3)
        assert not (brokers[1].data_dir / "streams" / "m").exists()
        answer = _admin(brokers[1], rf.ReplicaLeave(1, "m", 3), rf.ReplicaLeaveResponse)
        assert answer.code == Code.STREAM_DOES_NOT_EXIST
        await producer.send(b"after")
        await asyncio.wait_for(producer.flush(), 60)
        assert producer.unconfirmed == 0
        assert (await driver.contact(0, "m")) is not None

    expected = [b"a%d" % i for i in range(3000)] + [b"held", b"joined", b"three of four",
                                                    b"two of four", b"after"]
    async with await connect(brokers[3].host, brokers[3].port) as reader:
        consumer = await reader.consumer("m", "first", credit=50)
        got: list[bytes] = []

        async def read_all() -> bool:
            while len(got) < len(expected):
                got.append(bytes((await asyncio.wait_for(consumer.__anext__(), 30)).body))
            return True
        await asyncio.wait_for(read_all(), 60)
    assert got == expected, "the new member serves every message once, in order"

    def identical() -> bool:
        files = [segment_files(b, "m") for b in (brokers[0], brokers[2], brokers[3])]
        return files[0] == files[1] == files[2]
    await eventually(identical, 30, "the members' segment files byte-identical")
    contact = await driver.contact(3, "m")
    assert contact is not None and (contact.epoch, contact.following) == (3, True)
