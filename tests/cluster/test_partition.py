"""Network partitions in a local cluster, through fault proxies (tests/support/faultproxy.py):
real brokers on loopback, each reached by its peers and by the placement driver only through a
proxy in front of it, so a test cuts one member off while it keeps running. The driver class is
ticked in-process (no supervisor); the test's clients talk to the brokers directly."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from streamlet.cluster import requests
from streamlet.cluster.driver import SUSPECT_AFTER, LocalDriver
from streamlet.cluster.requests import Request
from streamlet.cluster.state import ClusterState
from streamlet.cluster.status import gather_streams
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from streamlet.rabbitmq.publish import publish_frame
from streamlet.replication.model import NO_LEADER
from streamlet.storage import StreamLog
from streamlet.storage.chunk import CHUNK_USER, iter_records
from tests.support.brokers import BrokerProcess, free_port
from tests.support.faultproxy import FaultProxy, LoopThread, every
from tests.support.raw import RawPeer

pytestmark = pytest.mark.process

HOST = "127.0.0.1"
TICK_S = 0.2


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout} s; last seen: {last!r}")


class ProxiedCluster:
    """``n`` brokers (three by default); member i's peers reach broker i through proxies[i],
    the driver through driver_proxies[i]."""

    def __init__(self, root: Path, bg: LoopThread, n: int = 3) -> None:
        self.root = root
        self.bg = bg
        # The proxies listen first and the brokers' ports are chosen while they do: a port chosen
        # first could be given to a proxy, which would then connect to itself without end.
        self.proxies = [bg.run(FaultProxy(0).start()) for _ in range(n)]
        self.driver_proxies = [bg.run(FaultProxy(0).start()) for _ in range(n)]
        ports = [free_port() for _ in range(n)]
        for proxy, driver_proxy, port in zip(self.proxies, self.driver_proxies, ports, strict=True):
            proxy.target_port = driver_proxy.target_port = port
        peers = ", ".join(f'"{HOST}:{p.port}"' for p in self.proxies)
        self.brokers: list[BrokerProcess] = []
        for i, port in enumerate(ports):
            (root / f"node-{i}").mkdir()
            config = root / f"node-{i}" / "broker.toml"
            config.write_text(f"[cluster]\nmember = {i}\npeers = [{peers}]\n")
            self.brokers.append(BrokerProcess(root / f"node-{i}", port=port, config=config))
        for b in self.brokers:
            b.start()
        self.driver = LocalDriver(root, HOST, [p.port for p in self.driver_proxies],
                                  peer_ports=[p.port for p in self.proxies])
        self._ticking: Any = None

    def create(self, name: str, members: Sequence[int] = (0, 1, 2)) -> None:
        """Created on each member and assigned by hand (epoch 1, member 0 leads), the leader's
        address its proxy's: the driver finds it by its members' state."""
        for i in members:
            with RawPeer(HOST, self.brokers[i].port) as peer:
                peer.handshake()
                peer.request(f.Create(peer.next_corr(), name, {}), f.CreateResponse)
        for i in members:
            role = Role.LEADER if i == 0 else Role.FOLLOWER
            with RawPeer(HOST, self.brokers[i].port) as peer:
                peer.handshake()
                answer = peer.request(rf.Assign(peer.next_corr(), name, 1, role, HOST,
                                               self.proxies[0].port, list(members)),
                                      rf.AssignResponse)
                assert getattr(answer, "code", None) == 1, answer

    def drive(self) -> None:
        """The driver ticks on the proxies' loop from now on, every broker running."""
        alive = {i: b.pid for i, b in enumerate(self.brokers)}
        self._ticking = self.bg.spawn(every(TICK_S, lambda: self.driver.tick(alive)))

    def stop_driving(self) -> None:
        if self._ticking is not None:
            self._ticking.cancel()
            self._ticking = None

    def cut(self, i: int, peers: bool = True, driver: bool = True) -> None:
        """Broker i cut off from its peers' links, the driver's requests, or both."""
        for proxy in [self.proxies[i]] * peers + [self.driver_proxies[i]] * driver:
            self.bg.call(proxy.cut)

    def heal(self, i: int) -> None:
        for proxy in (self.proxies[i], self.driver_proxies[i]):
            self.bg.call(proxy.heal)

    def record(self, name: str) -> tuple[int, int] | None:
        r = self.driver.records.get(name)
        return None if r is None else (r.epoch, r.leader)

    def member_state(self, i: int, name: str) -> dict[str, Any]:
        path = self.brokers[i].data_dir / "streams" / name / "replication.json"
        return dict(json.loads(path.read_text()))

    def files(self, i: int, name: str, suffixes: tuple[str, ...]) -> dict[str, bytes]:
        d = self.brokers[i].data_dir / "streams" / name
        return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix in suffixes}

    def identical(self, name: str, suffixes: tuple[str, ...],
                  members: Sequence[int] = (0, 1, 2)) -> bool:
        files = [self.files(i, name, suffixes) for i in members]
        return bool(files[0]) and all(f == files[0] for f in files)

    def stop(self) -> None:
        self.stop_driving()
        for b in self.brokers:
            b.stop()
        for p in self.proxies + self.driver_proxies:
            self.bg.run(p.close())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProxiedCluster]:
    with LoopThread() as bg:
        c = ProxiedCluster(tmp_path, bg)
        try:
            yield c
        finally:
            c.stop()


def _confirms_until(peer: RawPeer, ids: set[int], timeout: float) -> set[int]:
    """Confirmed publishing ids read from ``peer`` until ``ids`` are all among them."""
    got: set[int] = set()
    deadline = time.monotonic() + timeout
    while not ids <= got:
        assert time.monotonic() < deadline, f"confirms for {sorted(ids - got)[:5]}... missing"
        cmd = peer.recv()
        assert cmd is not None, "closed while waiting for confirms"
        if isinstance(cmd, f.PublishConfirm):
            got.update(cmd.publishing_ids)
    return got


def _frames_for(peer: RawPeer, seconds: float) -> list[object]:
    """Whatever ``peer`` receives in the next ``seconds`` (until it closes)."""
    out: list[object] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        peer.sock.settimeout(left)
        try:
            cmd = peer.recv()
        except TimeoutError:
            break
        if cmd is None:
            break
        out.append(cmd)
    peer.sock.settimeout(30)
    return out


def _user_records(directory: Path) -> list[bytes]:
    """The records of the user chunks of the log in ``directory`` (not its tracking chunks)."""
    out: list[bytes] = []
    with StreamLog(directory) as lg:
        ref = lg.find_chunk(0)
        while ref is not None:
            got = lg.read_chunks(ref)
            for _r, view in got:
                if view[1] == CHUNK_USER:
                    out.extend(bytes(b) for b in iter_records(view[48:]))
            ref = lg.next_chunk(got[-1][0])
    return out


def test_a_partitioned_leader_confirms_nothing_after_the_fence_and_is_truncated_on_healing(
        cluster: ProxiedCluster) -> None:
    """Member 0 leads; its proxy is cut (its followers' links and the driver's probes fail)
    while it keeps running and a client connected to it directly keeps publishing. The driver
    elects another leader in a new epoch; the old one never confirms what it took after the
    cut; healed, it is assigned follower, its uncommitted tail is truncated and the members'
    files end byte-identical, every confirmed message present once."""
    c = cluster
    c.create("t")
    c.drive()
    wait_until(lambda: c.record("t") == (1, 0), 30, "the driver's record of epoch 1")
    confirmed: set[bytes] = set()
    with RawPeer(HOST, c.brokers[0].port) as old:
        old.handshake()
        old.request(f.DeclarePublisher(old.next_corr(), 1, "", "t"), f.DeclarePublisherResponse)
        old.send_raw(publish_frame(1, enumerate([b"%d" % i for i in range(1, 101)], 1)))
        got = _confirms_until(old, set(range(1, 101)), 60)
        confirmed |= {b"%d" % i for i in got}

        c.cut(0)
        old.send_raw(publish_frame(1, enumerate([b"late%d" % i for i in range(101, 151)], 101)))
        epoch, leader = wait_until(
            lambda: (r := c.record("t")) is not None and r[0] > 1 and r[1] in (1, 2) and r,
            90, "another leader in a later epoch")
        state = c.member_state(0, "t")
        assert (state["epoch"], state["role"]) == (1, "leader"), "the old leader never heard"
        # still running and still taking publishes (the driver's fence could not reach it)
        old.send_raw(publish_frame(1, enumerate([b"late%d" % i for i in range(151, 161)], 151)))

        with RawPeer(HOST, c.brokers[leader].port) as new:  # the new leader confirms
            new.handshake()
            new.request(f.DeclarePublisher(new.next_corr(), 1, "", "t"),
                        f.DeclarePublisherResponse)
            new.send_raw(publish_frame(1, enumerate([b"%d" % i for i in range(1001, 1101)], 1001)))
            got = _confirms_until(new, set(range(1001, 1101)), 60)
            confirmed |= {b"%d" % i for i in got}

        cut_off = _frames_for(old, 1.0)
        c.heal(0)
        wait_until(lambda: (s := c.member_state(0, "t"))["role"] == "follower"
                   and s["epoch"] == epoch, 60, "the old leader assigned follower once reachable")
        wait_until(lambda: c.identical("t", (".segment",)), 60,
                   "the old leader's uncommitted tail truncated, the segments identical")
        after = cut_off + _frames_for(old, 2.0)
        assert not [x for x in after if isinstance(x, f.PublishConfirm)], (
            "nothing confirmed by the partitioned leader after the cut, ever")
        assert [x for x in after if isinstance(x, f.MetadataUpdate)], (
            "its publisher told to look the leader up again once it was fenced")
    c.stop()  # quiescence: index files are written out at the latest on close
    assert c.identical("t", (".segment", ".index")), "segment and index files byte-identical"
    bodies = _user_records(c.brokers[0].data_dir / "streams" / "t")
    assert sorted(bodies) == sorted(confirmed) and len(bodies) == len(set(bodies)), (
        "every confirmed message once, nothing the partitioned leader took after the cut")


def test_a_leader_only_the_driver_cannot_reach_keeps_leading_until_its_followers_lose_it(
        cluster: ProxiedCluster) -> None:
    """The driver's path to the leader cut, its followers' links not: the driver suspects it
    and asks the followers (ReplicaContact), who heard from it lately: no election, and the
    leader goes on committing. Its followers' links cut as well: they lose it, and another
    member is elected."""
    c = cluster
    c.create("v")
    c.drive()
    wait_until(lambda: c.record("v") == (1, 0), 30, "the driver's record of epoch 1")
    c.cut(0, peers=False)
    wait_until(lambda: c.driver.misses.get(0, 0) >= SUSPECT_AFTER + 8, 60,
               "the leader suspected for eight ticks (its followers asked at each)")
    assert c.record("v") == (1, 0), "no election while the followers are in contact"
    with RawPeer(HOST, c.brokers[0].port) as peer:  # and it still commits with them
        peer.handshake()
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, "", "v"), f.DeclarePublisherResponse)
        peer.send_raw(publish_frame(1, enumerate([b"%d" % i for i in range(1, 51)], 1)))
        _confirms_until(peer, set(range(1, 51)), 60)
    assert c.record("v") == (1, 0)
    c.cut(0, driver=False)
    wait_until(lambda: (r := c.record("v")) is not None and r[0] > 1 and r[1] in (1, 2), 90,
               "another leader once the followers lost it too")


def test_no_majority_elects_nobody_until_an_unclean_election_is_asked_for(
        cluster: ProxiedCluster, tmp_path: Path) -> None:
    """Members 0 (the leader) and 1 cut off: member 2 alone answers, so election after
    election finds no majority and names no leader. A forced election asked for
    (``cluster elect --force``'s request) elects member 2, logged and recorded as unclean;
    healed, the others follow it."""
    c = cluster
    c.create("u")
    c.drive()
    wait_until(lambda: c.record("u") == (1, 0), 30, "the driver's record of epoch 1")
    c.cut(0)
    c.cut(1)
    wait_until(lambda: (r := c.record("u")) is not None and r[0] >= 4 and r[1] == NO_LEADER, 90,
               "three elections without a majority")
    assert c.record("u")[1] == NO_LEADER, "no leader without a majority"  # type: ignore[index]
    assert c.member_state(2, "u")["role"] == "fenced"
    request = requests.write(tmp_path, Request(requests.ELECT, "u", force=True))
    epoch, leader = wait_until(lambda: (r := c.record("u")) is not None and r[1] != NO_LEADER
                               and r, 60, "a leader elected uncleanly")
    assert leader == 2 and c.driver.records["u"].unclean
    # the driver's thread saves its record just after changing it: wait for the file
    saved = wait_until(lambda: (u := json.loads((tmp_path / "driver.json").read_text())["u"])
                       ["leader"] == 2 and u, 30, "the unclean election saved")
    assert saved["unclean"] is True and saved["epoch"] == epoch
    wait_until(lambda: not request.exists(), 30, "the request taken up")
    streams = asyncio.run(gather_streams(ClusterState(0, HOST), [], tmp_path, ("guest", "guest")))
    assert [(s["name"], s["leader"], s["unclean"]) for s in streams] == [("u", 2, True)]
    c.heal(0)
    c.heal(1)
    def following(i: int) -> bool:
        state = c.member_state(i, "u")
        return bool(state["role"] == "follower" and state["epoch"] == epoch)

    for i in (0, 1):
        wait_until(partial(following, i), 60, f"member {i} following the unclean leader")
    assert c.record("u") == (epoch, 2), "the unclean leader keeps leading"
