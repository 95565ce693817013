"""A deposed placement driver is fenced, on a real broker process: its requests (Fence, Assign,
ReplicaSeal, ReplicaLeave), sent as the operator sends them (streamlet.driver.elector.Members
with its Lease's fencing token), are refused (16) once a higher token was seen, counted in a
metric and logged; the highest token survives a restart; a driver without a token (the local
cluster's, an operator without a Lease) is still taken, as is the newer token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.driver.elector import Members
from streamlet.rabbitmq import Code
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from tests.support.brokers import BrokerProcess, distinct_ports, free_port
from tests.support.scrape import scrape, value

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]
STREAM = "fenced"


def _member(tmp_path: Path, broker_factory: Factory, metrics: int) -> BrokerProcess:
    """Member 0 of a two-broker cluster whose other peer runs nothing."""
    me, other = distinct_ports(2)
    config = tmp_path / "member.toml"
    config.write_text(f'[cluster]\nmember = 0\npeers = ["127.0.0.1:{me}", "127.0.0.1:{other}"]\n')
    return broker_factory(config=config, port=me, extra_args=["--metrics-port", str(metrics)])


def _driver(b: BrokerProcess, token: int | None) -> Members:
    return Members(lambda _: (b.host, b.port), token=token)


async def _fence(b: BrokerProcess, token: int | None, epoch: int) -> Any:
    return await _driver(b, token).request(0, lambda c: rf.Fence(c, STREAM, epoch))


async def test_a_lower_fencing_token_is_refused_also_after_a_restart(
        tmp_path: Path, broker_factory: Factory) -> None:
    metrics = free_port()
    b = _member(tmp_path, broker_factory, metrics)
    async with await connect(b.host, b.port) as client:
        await client.create_stream(STREAM)

    assert (await _fence(b, 4, 1)).code == Code.OK  # the leader of Lease transition 4
    assert (b.data_dir / "driver-token").read_text().strip() == "4"
    stale = await _fence(b, 3, 2)  # the one it deposed
    assert stale.code == Code.ACCESS_REFUSED, stale
    deposed = _driver(b, 3)
    assert not await deposed.assign(0, STREAM, 2, Role.LEADER, 0, [0, 1])
    assert await deposed.seal(0, STREAM, 1) is None
    assert not await deposed.leave(0, STREAM, 1)
    assert (await _fence(b, 4, 2)).code == Code.OK, "the same token again: the same leader"
    assert (await _fence(b, None, 3)).code == Code.OK, "no token: a driver without a Lease"
    assert (await _fence(b, 3, 4)).code == Code.ACCESS_REFUSED  # checked before the stream
    samples = await scrape(metrics)
    assert value(samples, "streamlet_driver_fencing_token") == 4
    refused = {cmd: value(samples, "streamlet_driver_requests_fenced_total", command=cmd)
               for cmd in ("Fence", "Assign", "ReplicaSeal", "ReplicaLeave")}
    assert refused == {"Fence": 2, "Assign": 1, "ReplicaSeal": 1, "ReplicaLeave": 1}
    assert "Fence from" in b.log_text() and "fencing token 3 is below 4" in b.log_text()

    b.restart()
    assert (await _fence(b, 3, 5)).code == Code.ACCESS_REFUSED, "the token survives a restart"
    assert (await _fence(b, 5, 5)).code == Code.OK, "a newer leader is taken"
    assert (await _fence(b, 4, 6)).code == Code.ACCESS_REFUSED
    samples = await scrape(metrics)
    assert value(samples, "streamlet_driver_fencing_token") == 5
    # ReplicaContact only reads: answered whatever the token
    contact = await _driver(b, 1).request(0, lambda c: rf.ReplicaContact(c, STREAM))
    assert contact.code == Code.OK
