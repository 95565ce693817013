"""The placement driver's ReplicaContact and ReplicaSeal (0x7E10, 0x7E11) on real member
brokers: a follower says how long ago it heard from its leader (an idle leader's heartbeat
keeps it fresh); a sealed leader refuses publishes while its followers catch up with its tail,
and takes them again once unsealed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from streamlet.rabbitmq.publish import publish_frame
from tests.broker.test_replication import Factory, _admin, _stream_on_members
from tests.support.raw import RawPeer
from tests.support.waiting import eventually

pytestmark = pytest.mark.process


def _contact(b: Any, stream: str) -> rf.ReplicaContactResponse:
    answer = _admin(b, rf.ReplicaContact(1, stream), rf.ReplicaContactResponse)
    assert isinstance(answer, rf.ReplicaContactResponse)
    return answer


async def test_contact_and_seal(tmp_path: Path, broker_factory: Factory) -> None:
    brokers = await _stream_on_members("z", tmp_path, broker_factory)
    lead = _contact(brokers[0], "z")
    assert (lead.code, lead.epoch, lead.role, lead.age_ms) == (Code.OK, 1, Role.LEADER, -1)
    await eventually(lambda: _contact(brokers[1], "z").age_ms >= 0, 30, "the link up")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # idle, yet heard from within a heartbeat or so
        follower = _contact(brokers[1], "z")
        assert (follower.code, follower.epoch, follower.role) == (Code.OK, 1, Role.FOLLOWER)
        assert 0 <= follower.age_ms < 2000, follower
        await asyncio.sleep(0.2)

    assert _admin(brokers[0], rf.ReplicaSeal(1, "z", 2, 1), rf.ReplicaSealResponse).code == 6, (
        "not the leader of that epoch")
    assert _admin(brokers[1], rf.ReplicaSeal(1, "z", 1, 1), rf.ReplicaSealResponse).code == 6, (
        "a follower is not sealed")
    with RawPeer(brokers[0].host, brokers[0].port) as peer:
        peer.handshake()
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, "", "z"), f.DeclarePublisherResponse)
        peer.send_raw(publish_frame(1, enumerate([b"%d" % i for i in range(1, 101)], 1)))
        sealed = _admin(brokers[0], rf.ReplicaSeal(1, "z", 1, 1), rf.ReplicaSealResponse)
        assert sealed.code == Code.OK
        tail = (sealed.tail_epoch, sealed.tail_chunk_id, sealed.next_offset)
        assert tail[2] >= 100, "what it took is written before the answer"
        got: set[int] = set()
        told = False
        while got != set(range(1, 101)):  # still confirmed once committed: the feeds go on
            cmd = peer.recv()
            assert cmd is not None
            if isinstance(cmd, f.PublishConfirm):
                got.update(cmd.publishing_ids)
            told |= isinstance(cmd, f.MetadataUpdate)
        assert told or isinstance(peer.recv(), f.MetadataUpdate), "its publisher told 6"

    def caught_up() -> bool:
        c = _contact(brokers[2], "z")
        return (c.tail_epoch, c.tail_chunk_id, c.next_offset) == tail

    await eventually(caught_up, 30, "a follower holding the sealed leader's tail")
    with_peer = _admin(brokers[0], f.DeclarePublisher(1, 1, "", "z"), f.DeclarePublisherResponse)
    assert with_peer.code == Code.STREAM_NOT_AVAILABLE, "sealed: no publisher"
    assert _admin(brokers[0], rf.ReplicaSeal(1, "z", 1, 0), rf.ReplicaSealResponse).code == Code.OK
    async with await connect(brokers[0].host, brokers[0].port) as client:
        producer = await client.producer("z")
        await producer.send(b"again")
        await asyncio.wait_for(producer.flush(), 30)
