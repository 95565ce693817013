"""The placement driver stopped between the steps of an election (after the fence, before the
assignment), and another driver taking over from its record: the epoch it had reserved is never
used again, and the stream gets one leader in a later epoch. The same for a member change
stopped once recorded, and right after its new member set is recorded. Real brokers, the
driver class driven tick by tick (no supervisor)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streamlet.cluster import requests
from streamlet.cluster.driver import LocalDriver
from streamlet.cluster.requests import MEMBERS, Request
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from streamlet.replication.model import NO_LEADER
from tests.support.brokers import BrokerProcess, free_port
from tests.support.raw import RawPeer

pytestmark = pytest.mark.process

HOST = "127.0.0.1"


class Crash(Exception):
    """The driver's process ends here."""


def _nodes(tmp_path: Path, n: int) -> Iterator[list[BrokerProcess]]:
    """``n`` brokers that know each other as ``cluster.peers``, stopped afterwards."""
    ports = [free_port() for _ in range(n)]
    peers = ", ".join(f'"{HOST}:{p}"' for p in ports)
    brokers = []
    for i, port in enumerate(ports):
        (tmp_path / f"node-{i}").mkdir()
        config = tmp_path / f"node-{i}" / "broker.toml"
        config.write_text(f"[cluster]\nmember = {i}\npeers = [{peers}]\n")
        brokers.append(BrokerProcess(tmp_path / f"node-{i}", port=port, config=config).start())
    yield brokers
    for b in brokers:
        b.stop()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    yield from _nodes(tmp_path, 3)


def _epoch_on_disk(b: BrokerProcess, name: str) -> int:
    return int(json.loads((b.data_dir / "streams" / name / "replication.json").read_text())["epoch"])


async def test_a_driver_stopped_mid_election_is_taken_over_without_reusing_its_epoch(
        tmp_path: Path, nodes: list[BrokerProcess]) -> None:
    ports = [b.port for b in nodes]
    for b in nodes:
        with RawPeer(HOST, b.port) as peer:
            peer.handshake()
            peer.request(f.Create(peer.next_corr(), "d", {}), f.CreateResponse)
    for i, b in enumerate(nodes):
        with RawPeer(HOST, b.port) as peer:
            peer.handshake()
            role = Role.LEADER if i == 0 else Role.FOLLOWER
            peer.request(rf.Assign(peer.next_corr(), "d", 1, role, HOST, ports[0], [0, 1, 2]),
                         rf.AssignResponse)
    # BrokerProcess keeps its data in <dir>/node-i: the driver's layout, as cluster up makes it
    first = LocalDriver(tmp_path, HOST, ports)
    await first.tick({i: b.pid for i, b in enumerate(nodes)})
    assert first.records["d"].epoch == 1 and first.records["d"].leader == 0

    nodes[0].kill()
    alive = {1: nodes[1].pid, 2: nodes[2].pid}

    async def crash(*args: object, **kwargs: object) -> bool:
        raise Crash

    first.brokers.assign = crash  # type: ignore[method-assign]
    with pytest.raises(Crash):
        await first.tick(alive)  # epoch 2 reserved and the members fenced with it, no leader
    assert json.loads((tmp_path / "driver.json").read_text())["d"]["epoch"] == 2
    assert {_epoch_on_disk(nodes[i], "d") for i in (1, 2)} == {2}

    second = LocalDriver(tmp_path, HOST, ports)  # a new driver process, from the record
    assert second.records["d"].epoch == 2 and second.records["d"].leader == NO_LEADER
    await second.tick(alive)
    record = second.records["d"]
    assert record.epoch == 3, "the reserved epoch 2 is never used again"
    assert record.leader in (1, 2)
    assert {_epoch_on_disk(nodes[i], "d") for i in (1, 2)} == {3}
    leaders = [i for i in (1, 2) if json.loads(
        (nodes[i].data_dir / "streams" / "d" / "replication.json").read_text())["role"] == "leader"]
    assert leaders == [record.leader], "one leader in epoch 3"


@pytest.fixture
def nodes4(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    yield from _nodes(tmp_path, 4)


async def _ticks_until(driver: LocalDriver, alive: dict[int, int | None],
                       done: Callable[[], bool], what: str, ticks: int = 100) -> None:
    for _ in range(ticks):
        await driver.tick(alive)
        if done():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not reached in {ticks} ticks: {driver.records}")


async def test_a_driver_stopped_mid_change_is_taken_over_from_its_record(
        tmp_path: Path, nodes4: list[BrokerProcess]) -> None:
    """A driver stopped once an add is recorded (before the learner is made): the next one
    carries the add out from driver.json and answers the request. A driver stopped right
    after a remove's new member set is recorded (before any Assign): the next one elects in
    the recorded set and tells the removed member to drop its copy."""
    ports = [b.port for b in nodes4]
    for b in nodes4[:3]:
        with RawPeer(HOST, b.port) as peer:
            peer.handshake()
            peer.request(f.Create(peer.next_corr(), "m", {}), f.CreateResponse)
    for i, b in enumerate(nodes4[:3]):
        with RawPeer(HOST, b.port) as peer:
            peer.handshake()
            role = Role.LEADER if i == 0 else Role.FOLLOWER
            peer.request(rf.Assign(peer.next_corr(), "m", 1, role, HOST, ports[0], [0, 1, 2]),
                         rf.AssignResponse)
    alive: dict[int, int | None] = {i: b.pid for i, b in enumerate(nodes4)}
    first = LocalDriver(tmp_path, HOST, ports, replace_after=0)
    await first.tick(alive)
    assert first.records["m"].members == [0, 1, 2]

    async def crash(*args: object, **kwargs: object) -> bool:
        raise Crash

    grow = Request(MEMBERS, "m", to=3, change="add")
    requests.write(tmp_path, grow)
    first.brokers.learn = crash  # type: ignore[method-assign]
    with pytest.raises(Crash):
        await first.tick(alive)
    recorded = json.loads((tmp_path / "driver.json").read_text())["m"]
    assert recorded["change"]["kind"] == "add" and recorded["change"]["member"] == 3
    assert recorded["members"] == [0, 1, 2] and recorded["replicas"] == 4

    second = LocalDriver(tmp_path, HOST, ports, replace_after=0)
    await _ticks_until(second, alive, lambda: second.records["m"].change is None, "the add")
    record = second.records["m"]
    assert record.members == [0, 1, 2, 3] and record.leader == 0 and record.epoch == 2
    assert not requests.path(tmp_path, grow).exists() and requests.outcome(tmp_path, grow) is None
    assert _epoch_on_disk(nodes4[3], "m") == 2

    shrink = Request(MEMBERS, "m", to=3, change="remove")
    requests.write(tmp_path, shrink)
    second.brokers.assign = crash  # type: ignore[method-assign]
    with pytest.raises(Crash):
        await _ticks_until(second, alive, lambda: False, "a crash")
    recorded = json.loads((tmp_path / "driver.json").read_text())["m"]
    assert recorded["members"] == [0, 1, 2] and recorded["epoch"] == 3
    assert recorded["change"] is None and recorded["leaving"] == [3]

    third = LocalDriver(tmp_path, HOST, ports, replace_after=0)

    def settled() -> bool:
        r = third.records["m"]
        return r.leader != NO_LEADER and not r.leaving
    await _ticks_until(third, alive, settled, "a leader, member 3 gone")
    record = third.records["m"]
    assert record.members == [0, 1, 2] and record.epoch == 4, "elected in the recorded set"
    assert not (nodes4[3].data_dir / "streams" / "m").exists(), "the removed copy dropped"
    assert not requests.path(tmp_path, shrink).exists()
