"""The placement driver stopped between the steps of an election (after the fence, before the
assignment), and another driver taking over from its record: the epoch it had reserved is never
used again, and the stream gets one leader in a later epoch. Real brokers, the driver class
driven tick by tick (no supervisor)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamlet.cluster.driver import LocalDriver
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


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    ports = [free_port() for _ in range(3)]
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
