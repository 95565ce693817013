"""Leader failover in a local cluster (`streamlet cluster up`, real brokers on loopback): the
current leader of a 3-member stream is killed (kill -9) five times in a row while a named
producer publishes and, after each loss, resends what was not confirmed with the same ids (as
the Java client does). Every confirmed message is then in the stream exactly once and in order,
and the members' files end byte-identical."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.client.errors import StreamletError
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from streamlet.rabbitmq.publish import publish_frame
from tests.cluster.test_local_cluster import HOST, Cluster
from tests.cluster.test_local_cluster import wait_until as wait_sync
from tests.support.raw import RawPeer
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

N = 5000
KILLS = 5


def _assign(port: int, cmd: f.Command) -> None:
    with RawPeer(HOST, port) as peer:
        peer.handshake()
        answer = peer.request(cmd, rf.AssignResponse)
        assert getattr(answer, "code", None) == 1, answer


def _create_replicated(cluster: Cluster, name: str) -> None:
    """Created on every node and assigned by hand (epoch 1, member 0 leads): the driver finds
    it by its members' state and takes it over."""
    ports = cluster.ports()
    for port in ports:
        with RawPeer(HOST, port) as peer:
            peer.handshake()
            peer.request(f.Create(peer.next_corr(), name, {}), f.CreateResponse)
    for i, port in enumerate(ports):
        role = Role.LEADER if i == 0 else Role.FOLLOWER
        _assign(port, rf.Assign(1, name, 1, role, HOST, ports[0], [0, 1, 2]))


def _entry(cluster: Cluster, name: str) -> tuple[int, int | None]:
    """The driver's directory entry: the epoch, and the leading member (None while electing)."""
    try:
        entry = json.loads((cluster.data_dir / "directory.json").read_text())["streams"][name]
    except (OSError, ValueError, KeyError):
        return 0, None
    leader = entry["leader"]
    return entry["epoch"], (None if leader is None
                            else cluster.ports().index(int(leader.rpartition(":")[2])))


def _leader(cluster: Cluster, name: str) -> int | None:
    return _entry(cluster, name)[1]


def _led(cluster: Cluster, name: str) -> tuple[int, int] | None:
    """(epoch, leader) once a leader is named (a tuple: member 0 is a leader too)."""
    epoch, leader = _entry(cluster, name)
    return None if leader is None else (epoch, leader)


def _led_after(cluster: Cluster, name: str, epoch: int,
               value: bool = False) -> bool | tuple[int, int] | None:
    """A leader named in an epoch after ``epoch`` (with ``value``: its (epoch, leader))."""
    led = _led(cluster, name)
    found = led is not None and led[0] > epoch
    return (led if found else None) if value else found


def _leaderless_after(cluster: Cluster, name: str, epoch: int) -> bool:
    later, leader = _entry(cluster, name)
    return later > epoch and leader is None


def _at_least(confirmed: set[int], n: int) -> bool:
    return len(confirmed) >= n


def _record_confirms(producer: Any, confirmed: set[int]) -> None:
    """Adds every publishing id ``producer`` gets confirmed to ``confirmed``, then confirms it as
    before."""
    on_confirm = producer._on_confirm

    def record(ids: tuple[int, ...]) -> None:
        confirmed.update(ids)
        on_confirm(ids)

    producer._on_confirm = record


def _files(cluster: Cluster, node: int, name: str, suffixes: tuple[str, ...]) -> dict[str, bytes]:
    d = cluster.data_dir / f"node-{node}" / "streams" / name
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix in suffixes}


@pytest.fixture
def cluster(tmp_path: Path) -> object:
    c = Cluster(tmp_path / "c", 3).start()
    yield c
    c.stop()


async def test_killing_the_leader_five_times_loses_no_confirmed_message(cluster: Cluster) -> None:
    _create_replicated(cluster, "f")
    await eventually(lambda: _leader(cluster, "f") == 0, timeout=30, what="the driver's record")
    confirmed: set[int] = set()
    kills: list[int] = []

    async def killer() -> None:
        for k in range(KILLS):
            enough = (k + 1) * N // (KILLS + 1)
            await eventually(partial(_at_least, confirmed, enough), timeout=60,
                             what=f"{enough} confirmed")
            epoch, leader = await eventually(lambda: _led(cluster, "f"), timeout=30,
                                             what="a leader")
            os.kill(cluster.state()["nodes"][leader]["pid"], signal.SIGKILL)
            kills.append(leader)
            await eventually(partial(_led_after, cluster, "f", epoch), timeout=30,
                             what="a leader elected in a later epoch")

    async def publisher() -> None:
        while len(confirmed) < N:
            leader = _leader(cluster, "f")
            if leader is None:
                await asyncio.sleep(0.1)
                continue
            try:
                async with await connect(HOST, cluster.ports()[leader], timeout=5) as client:
                    producer = await client.producer("f", reference="app", max_unconfirmed=200)
                    _record_confirms(producer, confirmed)
                    for i in range(1, N + 1):  # what is not confirmed, again, with its id
                        if i not in confirmed:
                            await producer.send(b"%d" % i, publishing_id=i)
                    await asyncio.wait_for(producer.flush(), 10)
            except (StreamletError, OSError, TimeoutError):
                await asyncio.sleep(0.2)  # the leader is gone or fenced: ask the directory again

    await asyncio.wait_for(asyncio.gather(killer(), publisher()), 240)
    assert len(kills) == KILLS and len(confirmed) == N

    _, leader = await eventually(lambda: _led(cluster, "f"), timeout=30, what="a leader")
    async with await connect(HOST, cluster.ports()[leader]) as client:
        consumer = await client.consumer("f", "first", credit=100)
        bodies: list[int] = []
        while len(bodies) < N:
            message = await asyncio.wait_for(consumer.__anext__(), 30)
            bodies.append(int(message.body))
    assert bodies == list(range(1, N + 1)), "every confirmed message once, in order"

    def identical(suffixes: tuple[str, ...]) -> bool:
        files = [_files(cluster, i, "f", suffixes) for i in range(3)]
        return files[0] == files[1] == files[2] and bool(files[0])

    await eventually(lambda: identical((".segment",)), timeout=60,
                     what="the members' segment files byte-identical")
    assert cluster.stop() == 0  # quiescence: index records are written out at the latest on close
    assert identical((".segment", ".index")), "segment and index files byte-identical"


async def test_a_create_with_initial_cluster_size_makes_a_replicated_stream(
        cluster: Cluster) -> None:
    """As RabbitMQ clients create replicated streams: rstream's create_stream with
    initial-cluster-size; the broker that received it leads (client-local), the others follow,
    Metadata lists the leader and two replicas, and a confirm means two copies."""
    from rstream import Producer

    ports = cluster.ports()
    async with Producer(HOST, port=ports[1], username="guest", password="guest") as producer:
        await producer.create_stream("rs", arguments={"initial-cluster-size": 3})
        for i in range(100):
            await producer.send_wait("rs", b"%d" % i)
    async with await connect(HOST, ports[2]) as client:
        meta = await client.metadata(["rs"])
        brokers = {b.reference: b.port for b in meta.brokers}
        (entry,) = meta.streams
        assert brokers[entry.leader] == ports[1], "client-local: the broker that got the Create"
        assert sorted(brokers[r] for r in entry.replicas) == [ports[0], ports[2]]
        consumer = await client.consumer("rs", "first", credit=10)
        got = [int((await asyncio.wait_for(consumer.__anext__(), 30)).body) for _ in range(100)]
    assert got == list(range(100))

    def copies() -> bool:  # every member gets every message (a confirm waited for two)
        return all(b"99" in (cluster.data_dir / f"node-{node}" / "streams" / "rs" /
                             "00000000000000000000.segment").read_bytes() for node in range(3))

    await eventually(copies, timeout=30, what="three copies")


async def test_a_lagging_member_is_never_elected_and_no_majority_elects_nobody(
        cluster: Cluster) -> None:
    """Member 2 stopped (SIGSTOP) while messages are committed by 0 and 1; the leader killed:
    member 1 or the restarted 0 is elected, never the lagging 2. With 1 stopped as well and
    the leader killed again, no majority can be fenced: no leader (Metadata 0xFFFF) until 1
    runs again. Member 2, running again, catches up."""
    _create_replicated(cluster, "g")
    await eventually(lambda: _led(cluster, "g") == (1, 0), timeout=30, what="the driver's record")
    pids = [n["pid"] for n in cluster.state()["nodes"]]
    os.kill(pids[2], signal.SIGSTOP)
    try:
        async with await connect(HOST, cluster.ports()[0], timeout=10) as client:
            producer = await client.producer("g", reference="app")
            await producer.send_many(b"%d" % i for i in range(1, 501))
            await asyncio.wait_for(producer.flush(), 30)  # committed by 0 and 1 alone
        os.kill(pids[0], signal.SIGKILL)
        epoch, leader = await eventually(partial(_led_after, cluster, "g", 1, True), timeout=60,
                                         what="a leader elected in a later epoch")
        # Never the lagging 2; of 0 (restarted, the old leader's log) and 1, the rule takes the
        # highest (epoch, chunk id), then the lowest ordinal: 0.
        assert leader == 0
        alive = [n["pid"] for n in cluster.state()["nodes"]]
        os.kill(alive[1], signal.SIGSTOP)
        try:
            os.kill(alive[0], signal.SIGKILL)  # 0 comes back alone: no majority to fence
            await eventually(partial(_leaderless_after, cluster, "g", epoch), timeout=60,
                             what="an election without a majority, no leader")
        finally:
            os.kill(alive[1], signal.SIGCONT)
        _, leader = await eventually(partial(_led_after, cluster, "g", epoch, True), timeout=60,
                                     what="a leader once member 1 runs again")
        assert leader in (0, 1)
    finally:
        os.kill(pids[2], signal.SIGCONT)
    async with await connect(HOST, cluster.ports()[2], timeout=10) as client:
        consumer = await client.consumer("g", "first", credit=50)
        got = [int((await asyncio.wait_for(consumer.__anext__(), 30)).body) for _ in range(500)]
    assert got == list(range(1, 501)), "member 2 caught up with what was committed without it"


async def test_rstream_through_a_leader_kill(cluster: Cluster) -> None:
    """rstream unchanged: its producer finds the new leader by itself (the messages it reports
    unconfirmed are sent again by the application), and its consumer, on a replica, is not
    interrupted: it gets every confirmed message."""
    from rstream import (
        Consumer,
        ConsumerOffsetSpecification,
        MessageContext,
        OffsetType,
        Producer,
    )

    _create_replicated(cluster, "h")
    await eventually(lambda: _led(cluster, "h") == (1, 0), timeout=30, what="the driver's record")
    ports, n = cluster.ports(), 2000
    received: list[bytes] = []
    closed: list[object] = []

    async def on_message(body: bytes, context: MessageContext) -> None:
        received.append(bytes(body))

    consumer = Consumer(HOST, ports[2], username="guest", password="guest",
                        on_close_handler=lambda info: closed.append(info))
    await consumer.start()
    await consumer.subscribe("h", on_message, offset_specification=ConsumerOffsetSpecification(
        OffsetType.FIRST, None))
    confirmed: set[bytes] = set()

    async with Producer(HOST, ports[0], username="guest", password="guest") as producer:
        for i in range(n):
            body = b"%d" % i
            while body not in confirmed:
                try:  # a confirm each: unconfirmed is an exception, and sent again
                    await asyncio.wait_for(producer.send_wait("h", body), 10)
                    confirmed.add(body)
                except Exception:  # recovering: rstream reconnects to the new leader itself
                    await asyncio.sleep(0.2)
            if i == n // 2:
                os.kill(cluster.state()["nodes"][0]["pid"], signal.SIGKILL)
    await eventually(lambda: confirmed <= set(received), timeout=60,
                     what="the replica's consumer got every confirmed message")
    assert closed == [], "the consumer on a replica was never interrupted"
    await consumer.close()


def test_status_lists_the_replicated_streams(cluster: Cluster) -> None:
    """`cluster status --json` gives each replicated stream's epoch, leader, members and the
    leader's committed chunk id, as the driver keeps them."""
    from tests.cluster.test_local_cluster import status_json

    _create_replicated(cluster, "s")
    with RawPeer(HOST, cluster.ports()[0]) as peer:
        peer.handshake()
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, "", "s"), f.DeclarePublisherResponse)
        peer.send_raw(publish_frame(1, enumerate([b"x", b"y"], 1)))
        peer.recv_until(f.PublishConfirm)

    def listed() -> Any:
        streams = status_json(cluster.data_dir)["streams"]
        return streams if streams and streams[0]["committed"] is not None else None

    (entry,) = wait_sync(listed, 30, "the stream in cluster status")
    assert entry["name"] == "s" and entry["leader"] == 0 and entry["members"] == [0, 1, 2]
    assert entry["epoch"] == 1 and entry["committed"] >= 1


async def test_a_stopped_leader_is_replaced_and_confirms_nothing_after_its_fence(
        cluster: Cluster) -> None:
    """The leader's broker stopped (SIGSTOP: running, answering nothing) while a publisher on
    it sends more: the driver's probes replace it. Resumed, it is fenced and made a follower:
    the messages it took while cut off are never confirmed (its publisher is told 6), its
    uncommitted tail is truncated, and the members' files end identical."""
    _create_replicated(cluster, "p")
    await eventually(lambda: _led(cluster, "p") == (1, 0), timeout=30, what="the driver's record")
    ports = cluster.ports()
    old = cluster.state()["nodes"][0]["pid"]
    with RawPeer(HOST, ports[0], timeout=60) as peer:
        peer.handshake()
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, "", "p"), f.DeclarePublisherResponse)
        peer.send_raw(publish_frame(1, enumerate([b"%d" % i for i in range(1, 101)], 1)))
        first = peer.recv_until(f.PublishConfirm)
        assert isinstance(first, f.PublishConfirm)
        assert sorted(first.publishing_ids) == list(range(1, 101))
        os.kill(old, signal.SIGSTOP)
        try:
            peer.send_raw(publish_frame(1, enumerate([b"late%d" % i for i in range(101, 151)], 101)))
            epoch, leader = await eventually(partial(_led_after, cluster, "p", 1, True),
                                             timeout=60, what="a leader instead of the stopped one")
            assert leader != 0
        finally:
            os.kill(old, signal.SIGCONT)
        late: list[object] = []
        while True:  # until the fence reaches the publisher
            cmd = peer.recv()
            assert cmd is not None, "the old leader closed instead of telling its publisher"
            if isinstance(cmd, f.MetadataUpdate):
                break
            late.append(cmd)
        assert not [c for c in late if isinstance(c, f.PublishConfirm)], (
            "nothing confirmed by a leader cut off from its followers")
    async with await connect(HOST, ports[leader]) as client:
        consumer = await client.consumer("p", "first", credit=50)
        got = [bytes((await asyncio.wait_for(consumer.__anext__(), 30)).body) for _ in range(100)]
        assert got == [b"%d" % i for i in range(1, 101)]
        assert (await client.stream_stats("p"))["committed_chunk_id"] < 150

    await eventually(lambda: _files(cluster, 0, "p", (".segment",)) == _files(
        cluster, leader, "p", (".segment",)), timeout=60,
        what="the old leader's uncommitted tail truncated, its segment equal to the leader's")


async def test_deleting_a_replicated_stream_deletes_every_member(cluster: Cluster) -> None:
    """Delete on any member deletes the stream on all of them (as RabbitMQ does), and the
    placement driver forgets it: no election runs for a stream that is gone."""
    from tests.cluster.test_local_cluster import status_json

    ports = cluster.ports()
    async with await connect(HOST, ports[0]) as client:
        await client.create_stream("x", arguments={"initial-cluster-size": "3"})
    await eventually(lambda: _led(cluster, "x") is not None, timeout=30, what="the driver's record")
    async with await connect(HOST, ports[2]) as client:  # a follower takes the Delete
        await client.delete_stream("x")
    for node in range(3):
        assert not (cluster.data_dir / f"node-{node}" / "streams" / "x").exists(), node
    os.kill(cluster.state()["nodes"][0]["pid"], signal.SIGKILL)  # the driver looks at it again

    def forgotten() -> bool:
        return "x" not in json.loads((cluster.data_dir / "driver.json").read_text())

    await eventually(forgotten, timeout=60, what="the driver forgets the deleted stream")
    assert all(s["name"] != "x" for s in status_json(cluster.data_dir)["streams"])
