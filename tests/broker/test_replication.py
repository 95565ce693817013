"""Replicated streams on real broker processes (loopback): a leader assigned by the driver's
Assign, two followers that pull its chunks, confirms after a majority, reads of committed data
on the followers, and members whose files end byte-identical."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.client.errors import StreamletError
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from tests.support.brokers import BrokerProcess, distinct_ports, free_port
from tests.support.raw import RawPeer
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]


def _members(tmp_path: Path, broker_factory: Factory, n: int = 3,
             cluster: str = "") -> list[BrokerProcess]:
    """``n`` brokers, member ids 0..n-1, each knowing the others (cluster.peers: a broker in no
    cluster takes no Fence or Assign); ``cluster``: more lines of their [cluster] section."""
    ports = distinct_ports(n)
    peers = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    brokers = []
    for i in range(n):
        config = tmp_path / f"member{i}.toml"
        config.write_text(f"[cluster]\nmember = {i}\npeers = [{peers}]\n{cluster}")
        brokers.append(broker_factory(config=config, port=ports[i]))
    return brokers


def ask(peer: RawPeer, cmd: f.Command, response: type[f.Command]) -> Any:
    return peer.request(cmd, response)


def _admin(broker: BrokerProcess, cmd: f.Command, response: type[f.Command]) -> Any:
    with RawPeer(broker.host, broker.port) as peer:
        peer.handshake()
        return ask(peer, cmd, response)


def assign(brokers: list[BrokerProcess], stream: str, epoch: int, leader: int,
           ids: list[int] | None = None) -> None:
    """What the placement driver does: the leader first, then the followers. ``ids``: the
    brokers' member ids (their positions when not given)."""
    ids = ids if ids is not None else list(range(len(brokers)))
    lead = brokers[leader]
    order = [leader] + [i for i in range(len(brokers)) if i != leader]
    for i in order:
        role = Role.LEADER if i == leader else Role.FOLLOWER
        answer = _admin(brokers[i], rf.Assign(1, stream, epoch, role, lead.host, lead.port, ids),
                        rf.AssignResponse)
        assert answer.code == Code.OK, (i, answer)


async def _stream_on_members(name: str, tmp_path: Path, broker_factory: Factory,
                             n: int = 3, cluster: str = "") -> list[BrokerProcess]:
    """``n`` member brokers holding stream ``name``, epoch 1 assigned, member 0 leading."""
    brokers = _members(tmp_path, broker_factory, n, cluster)
    for b in brokers:
        async with await connect(b.host, b.port) as c:
            await c.create_stream(name)
    assign(brokers, name, 1, leader=0)
    return brokers


def segment_files(broker: BrokerProcess, stream: str) -> dict[str, bytes]:
    directory = broker.data_dir / "streams" / stream
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.suffix in (".segment", ".index")}


async def test_a_replicated_stream_confirms_on_a_majority_and_its_members_end_identical(
        tmp_path: Path, broker_factory: Factory) -> None:
    brokers = await _stream_on_members("r", tmp_path, broker_factory)
    leader, follower = brokers[0], brokers[1]
    async with await connect(leader.host, leader.port) as client:
        producer = await client.producer("r", reference="app")
        await producer.send_many(b"m%d" % i for i in range(2000))
        await asyncio.wait_for(producer.flush(), 60)  # every message confirmed
        assert producer.unconfirmed == 0

    async with await connect(follower.host, follower.port) as reader:
        consumer = await reader.consumer("r", "first", credit=50)
        got: list[bytes] = []

        async def read_all() -> bool:
            while len(got) < 2000:
                got.append(bytes((await asyncio.wait_for(consumer.__anext__(), 30)).body))
            return True

        await asyncio.wait_for(read_all(), 60)
        assert got == [b"m%d" % i for i in range(2000)], "a follower serves what was committed"

    def identical() -> bool:
        files = [segment_files(b, "r") for b in brokers]
        return files[0] == files[1] == files[2] and bool(files[0])

    await eventually(identical, timeout=30, what="the members' segment and index files equal")


async def test_without_a_majority_nothing_is_confirmed(tmp_path: Path,
                                                      broker_factory: Factory) -> None:
    brokers = await _stream_on_members("q", tmp_path, broker_factory)
    async with await connect(brokers[0].host, brokers[0].port) as client:
        producer = await client.producer("q")
        await producer.send(b"before")
        await asyncio.wait_for(producer.flush(), 30)
        brokers[1].kill()
        brokers[2].kill()
        await producer.send(b"after")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(producer.flush(), 2)  # the leader alone is no majority
        assert producer.unconfirmed == 1
        brokers[1].start()  # a restarted member is fenced until assigned
        assign([brokers[0], brokers[1]], "q", 2, leader=0, ids=[0, 1])
        await asyncio.wait_for(producer.flush(), 30)
        assert producer.unconfirmed == 0


def test_a_stale_epoch_is_refused(tmp_path: Path, broker_factory: Factory) -> None:
    (b,) = _members(tmp_path, broker_factory, 1)
    with RawPeer(b.host, b.port) as peer:
        peer.handshake()
        ask(peer, f.Create(peer.next_corr(), "s", {}), f.CreateResponse)
        fenced = ask(peer, rf.Fence(peer.next_corr(), "s", 5), rf.FenceResponse)
        assert fenced.code == Code.OK and fenced.epoch == 5
        stale = ask(peer, rf.Fence(peer.next_corr(), "s", 4), rf.FenceResponse)
        assert stale.code == Code.STREAM_NOT_AVAILABLE and stale.epoch == 5
        old = ask(peer, rf.Assign(peer.next_corr(), "s", 3, Role.LEADER, b.host, b.port, [0]),
                           rf.AssignResponse)
        assert old.code == Code.STREAM_NOT_AVAILABLE
    b.restart()  # the epoch is on disk: still refused after a restart
    with RawPeer(b.host, b.port) as peer:
        peer.handshake()
        stale = ask(peer, rf.Fence(peer.next_corr(), "s", 4), rf.FenceResponse)
        assert stale.code == Code.STREAM_NOT_AVAILABLE and stale.epoch == 5


async def test_a_replicated_create_that_cannot_reach_a_member_is_undone(
        tmp_path: Path, broker_factory: Factory) -> None:
    """initial-cluster-size 3 with one of the three peers down: answered 6 (not available),
    and the members already made are deleted again, so a retry starts clean."""
    ports = [free_port(), free_port(), free_port()]  # the last is never started
    brokers = []
    for i in range(2):
        config = tmp_path / f"peer{i}.toml"
        peers = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
        config.write_text(f"[cluster]\nmember = {i}\npeers = [{peers}]\n")
        brokers.append(broker_factory(config=config, port=ports[i]))
    async with await connect(brokers[0].host, brokers[0].port) as client:
        with pytest.raises(StreamletError) as e:
            await client.create_stream("u", arguments={"initial-cluster-size": "3"})
        assert e.value.code == Code.STREAM_NOT_AVAILABLE
        assert not await client.stream_exists("u")
        await client.create_stream("u", arguments={"initial-cluster-size": "2"})  # the two alive
        meta = await client.metadata(["u"])
        assert meta.streams[0].leader != 0xFFFF and len(meta.streams[0].replicas) == 1
    async with await connect(brokers[1].host, brokers[1].port) as other:
        assert await other.stream_exists("u")


async def test_offsets_and_sequences_asked_of_a_follower_are_the_leaders(
        tmp_path: Path, broker_factory: Factory) -> None:
    """rstream stores and queries offsets, and queries publisher sequences, on whichever
    connection it has: a follower passes them to its leader, and its own log takes no chunk
    that did not come from the leader (the members' files stay identical)."""
    brokers = await _stream_on_members("o", tmp_path, broker_factory)
    async with await connect(brokers[0].host, brokers[0].port) as leader:
        producer = await leader.producer("o", reference="app")
        await producer.send_many([b"a", b"b", b"c"])
        await asyncio.wait_for(producer.flush(), 30)
    async with await connect(brokers[1].host, brokers[1].port) as follower:
        assert await follower.query_publisher_sequence("app", "o") == 3
        await follower.store_offset("reader", "o", 2)
        assert await eventually(lambda: follower.query_offset("reader", "o"),
                                what="the stored offset") == 2
    async with await connect(brokers[0].host, brokers[0].port) as leader:
        assert await leader.query_offset("reader", "o") == 2, "stored by the leader"

    def identical() -> bool:
        files = [{k: v for k, v in segment_files(b, "o").items() if k.endswith(".segment")}
                 for b in brokers]
        return files[0] == files[1] == files[2] and bool(files[0])

    await eventually(identical, timeout=30, what="the members' segment files equal")


async def test_metadata_follows_an_assign_before_the_directory_does(
        tmp_path: Path, broker_factory: Factory) -> None:
    """A member answers Metadata from its own state when it is newer (a higher epoch) than the
    directory file, which brokers re-read at most once a second: clients find a new leader as
    soon as the members know it."""
    directory = tmp_path / "directory.json"
    brokers = await _stream_on_members("n", tmp_path, broker_factory,
                                       cluster=f'directory_file = "{directory}"\n')
    directory.write_text(json.dumps({"streams": {"n": {
        "epoch": 1, "leader": f"127.0.0.1:{brokers[0].port}",
        "replicas": [f"127.0.0.1:{b.port}" for b in brokers[1:]]}}}))
    async with await connect(brokers[2].host, brokers[2].port) as client:
        async def leader_port() -> int:
            meta = await client.metadata(["n"])
            ports = {b.reference: b.port for b in meta.brokers}
            return ports.get(meta.streams[0].leader, 0)

        assert await eventually(leader_port, what="the directory read") == brokers[0].port
        brokers[0].kill()
        assign(brokers[1:], "n", 2, leader=0, ids=[1, 2])  # 1 leads epoch 2; the file: epoch 1
        assert await leader_port() == brokers[1].port


async def test_without_a_driver_restarted_members_resume_their_roles(
        tmp_path: Path, broker_factory: Factory) -> None:
    """cluster.resume_roles (what the operator sets until it elects): a restarted leader leads
    again in its epoch and a restarted follower follows again, so a rolling restart leaves the
    stream writable; without it a restarted member waits fenced for a driver."""
    brokers = await _stream_on_members("v", tmp_path, broker_factory,
                                       cluster="resume_roles = true\n")
    sent = 0
    for restarted in (1, 0, 2):  # a rolling restart: one pod at a time, the leader among them
        brokers[restarted].restart()
        async with await connect(brokers[0].host, brokers[0].port) as client:
            producer = await client.producer("v", reference="app")
            await producer.send_many(b"%d" % i for i in range(sent, sent + 100))
            await asyncio.wait_for(producer.flush(), 60)  # a majority again after each restart
            sent += 100
    async with await connect(brokers[2].host, brokers[2].port) as client:
        consumer = await client.consumer("v", "first", credit=50)
        got = [int((await asyncio.wait_for(consumer.__anext__(), 30)).body) for _ in range(sent)]
    assert got == list(range(sent))
