"""Who may drive replication, and state that cannot poison a restart, on real broker processes:
the private replication commands are refused (16) to an application user that has configure
permission on its stream and accepted from the replication and driver users; a Fence or Assign
a member cannot take (epoch 0, a broker in no cluster, a leader that is no peer) is refused
before anything is saved; the replication user's password never goes to an address that is not
a peer; a stream whose saved state cannot be read is set aside while the others serve; and two
leaders in one epoch are noticed (log, metric, the management API's queue object)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from streamlet.client import connect
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from tests.broker.test_replication import assign
from tests.support.brokers import BrokerProcess, distinct_ports, free_port
from tests.support.raw import RawPeer
from tests.support.scrape import scrape, value
from tests.support.users import APP, app_users
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]
HOST = "127.0.0.1"
USERS = app_users(more='[[users]]\nname = "driver"\npassword = "driver-pw"')


def _config(tmp_path: Path, name: str, cluster: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f"[cluster]\n{cluster}\n{USERS}" if cluster else USERS)
    return path


def _peers(ports: list[int]) -> str:
    return "peers = [" + ", ".join(f'"{HOST}:{p}"' for p in ports) + "]\n"


def _member(tmp_path: Path, broker_factory: Factory, cluster: str = "",
            extra_args: list[str] | None = None) -> tuple[BrokerProcess, int]:
    """Member 0 of a two-broker cluster whose other peer (the port returned) runs nothing."""
    me, other = distinct_ports(2)
    config = _config(tmp_path, "member", f"member = 0\n{_peers([me, other])}{cluster}")
    return broker_factory(config=config, port=me, extra_args=extra_args), other


def _ask(b: BrokerProcess, cmd: f.Command, response: type[f.Command],
         user: tuple[str, str] = ("guest", "guest")) -> Any:
    with RawPeer(b.host, b.port) as peer:
        peer.handshake(*user)
        return peer.request(cmd, response)


def _state(b: BrokerProcess, stream: str) -> Path:
    return b.data_dir / "streams" / stream / "replication.json"


async def _round_trip(b: BrokerProcess, stream: str, user: tuple[str, str] = ("guest", "guest"),
                      create: bool = True) -> None:
    """A publish confirmed and read back: the broker serves ``stream``."""
    async with await connect(b.host, b.port, *user) as client:
        if create:
            await client.create_stream(stream, exists_ok=True)
        producer = await client.producer(stream)
        await producer.send(b"served")
        await asyncio.wait_for(producer.flush(), 30)
        consumer = await client.consumer(stream, "last", credit=1)
        message = await asyncio.wait_for(consumer.__anext__(), 30)
        assert bytes(message.body) == b"served"


def test_an_application_user_sends_no_replication_command(tmp_path: Path,
                                                          broker_factory: Factory) -> None:
    b, other = _member(tmp_path, broker_factory)
    with RawPeer(b.host, b.port) as peer:
        peer.handshake(*APP)
        created: Any = peer.request(f.Create(peer.next_corr(), "app-s", {}), f.CreateResponse)
        assert created.code == Code.OK
        c = peer.next_corr
        refused: list[tuple[f.Command, type[f.Command]]] = [
            (rf.Fence(c(), "app-s", 5), rf.FenceResponse),
            (rf.Assign(c(), "app-s", 1, Role.LEADER, HOST, b.port, [0, 1]), rf.AssignResponse),
            (rf.Assign(c(), "app-s", 1, Role.FOLLOWER, HOST, other, [0, 1]), rf.AssignResponse),
            (rf.ReplicaSeal(c(), "app-s", 1, 1), rf.ReplicaSealResponse),
            (rf.ReplicaContact(c(), "app-s"), rf.ReplicaContactResponse),
            (rf.ReplicaHello(c(), "app-s", 1, 1, 0, -1, 0), rf.ReplicaHelloResponse),
            (rf.ReplicaStart(c(), 1, 0, -1, 0), rf.ReplicaStartResponse),
            (rf.SacJoin(c(), "app-s", 1, 1, "g"), rf.SacJoinResponse),
        ]
        for cmd, response in refused:
            answer: Any = peer.request(cmd, response)
            assert answer.code == Code.ACCESS_REFUSED, (cmd, answer)
        peer.send(rf.ReplicaAck(1, 0, 0))  # no answer to give: the connection is closed, 16
        close: Any = peer.recv_until(f.Close)
        assert close.code == Code.ACCESS_REFUSED
    assert not _state(b, "app-s").exists(), "nothing saved"
    assert "user app refused Fence" in b.log_text()
    # the replication user (the first) may; a user with every permission but no identity not
    assert _ask(b, rf.ReplicaContact(1, "app-s"), rf.ReplicaContactResponse).code == 17  # one copy
    assert _ask(b, rf.Fence(1, "app-s", 2), rf.FenceResponse,
                ("driver", "driver-pw")).code == Code.ACCESS_REFUSED
    assert _ask(b, rf.Fence(1, "app-s", 2), rf.FenceResponse).code == Code.OK
    assert json.loads(_state(b, "app-s").read_text())["epoch"] == 2


def test_the_driver_user_drives(tmp_path: Path, broker_factory: Factory) -> None:
    """[cluster] driver_user: the placement driver's identity beside the replication user's."""
    b, other = _member(tmp_path, broker_factory, 'driver_user = "driver"\n')
    assert _ask(b, f.Create(1, "d", {}), f.CreateResponse).code == Code.OK
    driver = ("driver", "driver-pw")
    assert _ask(b, rf.Fence(1, "d", 1), rf.FenceResponse, driver).code == Code.OK
    answer = _ask(b, rf.Assign(1, "d", 1, Role.FOLLOWER, HOST, other, [0, 1]), rf.AssignResponse,
                  driver)
    assert answer.code == Code.OK
    assert _ask(b, rf.ReplicaContact(1, "d"), rf.ReplicaContactResponse, driver).code == Code.OK
    assert _ask(b, rf.Fence(1, "d", 2), rf.FenceResponse).code == Code.OK  # the replication user's
    assert _ask(b, rf.Fence(1, "d", 3), rf.FenceResponse, APP).code == Code.ACCESS_REFUSED


async def test_fence_in_epoch_0_is_refused_and_the_broker_restarts(
        tmp_path: Path, broker_factory: Factory) -> None:
    b, other = _member(tmp_path, broker_factory)
    async with await connect(b.host, b.port) as client:
        await client.create_stream("s")
    assert _ask(b, rf.Fence(1, "s", 0), rf.FenceResponse).code == Code.PRECONDITION_FAILED
    answer = _ask(b, rf.Assign(1, "s", 0, Role.FOLLOWER, HOST, other, [0, 1]), rf.AssignResponse)
    assert answer.code == Code.PRECONDITION_FAILED
    assert not _state(b, "s").exists()
    assert "Fence in epoch 0 refused: epoch 0: epochs start at 1" in b.log_text()
    b.restart()
    await _round_trip(b, "s", create=False)  # not fenced: it never took the epoch


async def test_a_broker_in_no_cluster_takes_no_fence_or_assign(
        tmp_path: Path, broker_factory: Factory) -> None:
    b = broker_factory(config=_config(tmp_path, "alone", ""))
    async with await connect(b.host, b.port) as client:
        await client.create_stream("x")
    assert _ask(b, rf.Fence(1, "x", 5), rf.FenceResponse).code == Code.PRECONDITION_FAILED
    answer = _ask(b, rf.Assign(1, "x", 1, Role.LEADER, b.host, b.port, [0]), rf.AssignResponse)
    assert answer.code == Code.PRECONDITION_FAILED
    assert _ask(b, rf.ReplicaSeal(1, "x", 1, 1), rf.ReplicaSealResponse).code == 17
    assert not _state(b, "x").exists()
    assert "no [cluster] peers" in b.log_text()
    b.restart()
    await _round_trip(b, "x", create=False)  # writable: never fenced


async def test_unreadable_saved_state_sets_its_stream_aside(tmp_path: Path,
                                                            broker_factory: Factory) -> None:
    metrics = free_port()
    b, _ = _member(tmp_path, broker_factory, extra_args=["--metrics-port", str(metrics)])
    async with await connect(b.host, b.port) as client:
        for name in ("good", "bad-repl", "bad-meta"):
            await client.create_stream(name)
    b.stop()
    streams = b.data_dir / "streams"
    bad_state, bad_meta = streams / "bad-repl" / "replication.json", streams / "bad-meta" / "stream.json"
    bad_state.write_text('{"epoch": 0, "role": "fenced", "members": []}')  # an old Fence(0)'s
    bad_meta.write_text("{not json")
    b.start()
    await _round_trip(b, "good", create=False)  # the others serve

    with RawPeer(b.host, b.port) as peer:
        peer.handshake()
        c = peer.next_corr
        meta: Any = peer.request(f.Metadata(c(), ["bad-repl", "bad-meta", "good", "none"]),
                                 f.MetadataResponse)
        assert [s.code for s in meta.streams] == [6, 6, 1, 2]
        asked: list[tuple[f.Command, type[f.Command]]] = [
            (f.DeclarePublisher(c(), 1, "", "bad-repl"), f.DeclarePublisherResponse),
            (f.Subscribe(c(), 1, "bad-meta", 1, 0, 10, {}), f.SubscribeResponse),
            (f.StreamStats(c(), "bad-repl"), f.StreamStatsResponse),
            (f.Create(c(), "bad-meta", {}), f.CreateResponse),
            (f.Delete(c(), "bad-repl"), f.DeleteResponse),
            (rf.Fence(c(), "bad-repl", 3), rf.FenceResponse),
        ]
        for cmd, response in asked:
            answer: Any = peer.request(cmd, response)
            assert answer.code == Code.STREAM_NOT_AVAILABLE, (cmd, answer)
    assert bad_state.read_text().startswith('{"epoch": 0'), "left as it was"
    assert bad_meta.read_text() == "{not json"
    log = b.log_text()
    assert f"{bad_state}: not a replication state" in log and f"{bad_meta}: JSONDecodeError" in log
    samples = await scrape(metrics)
    assert value(samples, "streamlet_streams_unreadable", vhost="/") == 2

    bad_state.unlink()  # repaired by hand: served again at the next start
    b.restart()
    await _round_trip(b, "bad-repl", create=False)
    assert value(await scrape(metrics), "streamlet_streams_unreadable", vhost="/") == 1


class Listener:
    """A socket that records who connects and what they send (a rogue or a fake peer)."""

    def __init__(self) -> None:
        self.connections = 0
        self.received = bytearray()
        self.server: asyncio.Server | None = None

    async def start(self, port: int) -> Listener:
        self.server = await asyncio.start_server(self._accept, HOST, port)
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while data := await reader.read(65536):
                self.received += data
        except ConnectionError:
            pass
        writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def listeners() -> AsyncIterator[Callable[[int], Any]]:
    started: list[Listener] = []

    async def make(port: int) -> Listener:
        started.append(await Listener().start(port))
        return started[-1]

    yield make
    for listener in started:
        listener.close()


async def test_no_login_reaches_an_address_that_is_no_peer(
        tmp_path: Path, broker_factory: Factory, listeners: Callable[[int], Any]) -> None:
    """An Assign naming a leader that is not one of cluster.peers is refused (17, nothing
    saved), from the replication user too, and so is a stored state naming one (resume_roles):
    the rogue listener never sees a connection, while the configured peer does."""
    rogue = await listeners(free_port())
    b, other = _member(tmp_path, broker_factory, "resume_roles = true\n")
    peer = await listeners(other)  # the configured peer: a follower's link goes there
    async with await connect(b.host, b.port) as client:
        await client.create_stream("s")
    port = rogue.server.sockets[0].getsockname()[1]
    for user in (APP, ("guest", "guest")):
        answer = _ask(b, rf.Assign(1, "s", 1, Role.FOLLOWER, HOST, port, [0, 1]),
                      rf.AssignResponse, user)
        assert answer.code == (Code.ACCESS_REFUSED if user == APP else
                               Code.PRECONDITION_FAILED)
    assert not _state(b, "s").exists()
    assert f"leader {HOST}:{port}: not one of cluster.peers" in b.log_text()
    # a follower of the configured peer: its link reaches that one (and only that one)
    answer = _ask(b, rf.Assign(1, "s", 1, Role.FOLLOWER, HOST, other, [0, 1]), rf.AssignResponse)
    assert answer.code == Code.OK
    await eventually(lambda: peer.connections, what="the follower's link at its peer")
    assert rogue.connections == 0 and not rogue.received

    b.stop()  # a saved state naming the rogue as the leader: the restart does not log in there
    _state(b, "s").write_text(json.dumps({"epoch": 2, "role": "follower", "members": [0, 1],
                                          "leader": [HOST, port]}))
    before = peer.connections
    b.start()
    assert "cannot resume as follower" in b.log_text()
    answer = _ask(b, rf.Assign(1, "s", 3, Role.FOLLOWER, HOST, other, [0, 1]), rf.AssignResponse)
    assert answer.code == Code.OK
    await eventually(lambda: peer.connections > before, what="the link to the peer again")
    assert rogue.connections == 0 and not rogue.received


def _api_queue(port: int, name: str) -> Any:
    r = requests.get(f"http://{HOST}:{port}/api/queues/%2F/{name}", auth=("guest", "guest"),
                     timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


async def test_two_leaders_in_one_epoch_are_noticed(tmp_path: Path,
                                                    broker_factory: Factory) -> None:
    ports = distinct_ports(3)
    metrics, http = free_port(), free_port()
    brokers = []
    for i in range(3):
        extra = ["--metrics-port", str(metrics), "--http-port", str(http)] if i == 1 else \
            ["--metrics-port", "0", "--http-port", "0"]
        config = _config(tmp_path, f"m{i}", f"member = {i}\n{_peers(ports)}")
        brokers.append(broker_factory(config=config, port=ports[i], extra_args=extra))
    for b in brokers:
        async with await connect(b.host, b.port) as client:
            await client.create_stream("s")
    assign(brokers, "s", 1, leader=0)
    follower = brokers[1]
    assert _api_queue(http, "s")["split_brain"] is None

    # member 2 says member 1 leads epoch 1, which member 1 knows member 0 leads
    hello = _ask(follower, rf.ReplicaHello(1, "s", 1, 2, 0, -1, 0), rf.ReplicaHelloResponse)
    assert hello.code == Code.STREAM_NOT_AVAILABLE
    assert ("two leaders in epoch 1: member 0 as this member knows, member 1 by ReplicaHello "
            "from member 2") in follower.log_text()
    samples = await scrape(metrics)
    assert value(samples, "streamlet_replication_split_brain_total", vhost="/", stream="s") == 1
    assert _api_queue(http, "s")["split_brain"] == {"epoch": 1, "known_leader": 0,
                                                    "claimed_leader": 1, "count": 1}

    # an Assign of the same epoch naming another leader: noticed too
    answer = _ask(follower, rf.Assign(1, "s", 1, Role.LEADER, HOST, follower.port, [0, 1, 2]),
                  rf.AssignResponse)
    assert answer.code == Code.OK  # the driver is trusted; the member says what it saw
    assert "member 1 by Assign" in follower.log_text()
    samples = await scrape(metrics)
    assert value(samples, "streamlet_replication_split_brain_total", vhost="/", stream="s") == 2
    # a later epoch names a new leader: no split brain
    assign(brokers, "s", 2, leader=2)
    assert _api_queue(http, "s")["split_brain"]["count"] == 2


async def test_an_application_naming_its_connection_as_a_peer_still_deletes_everywhere(
        tmp_path: Path, broker_factory: Factory) -> None:
    """A member passes a Delete on to the others unless the Delete came from another member:
    its connection's name says so only when its user is a cluster identity, so an application
    that names its connection "streamlet replication" cannot leave copies behind."""
    ports = distinct_ports(2)
    brokers = []
    for i in range(2):
        config = _config(tmp_path, f"d{i}", f"member = {i}\n{_peers(ports)}")
        brokers.append(broker_factory(config=config, port=ports[i]))
    async with await connect(brokers[0].host, brokers[0].port, *APP) as client:
        await client.create_stream("app-d", arguments={"initial-cluster-size": "2"})
    for b in brokers:
        async with await connect(b.host, b.port, *APP) as client:
            assert await client.stream_exists("app-d")
    async with await connect(brokers[1].host, brokers[1].port, *APP,
                             connection_name="streamlet replication") as client:
        await client.delete_stream("app-d")
    for b in brokers:
        async with await connect(b.host, b.port, *APP) as client:
            assert not await client.stream_exists("app-d"), f"a copy left on {b.port}"
