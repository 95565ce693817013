"""A replicated stream's metrics on real broker processes (loopback), scraped from each
member's /metrics: every member reports its epoch, its member set's size, whether it leads,
the epochs it was assigned to lead and its member set changes; the leader reports the members
in sync and each follower's lag. A follower stopped (SIGSTOP) while publishes go on falls
behind (its lag grows) and out of sync; let go, it catches up. The management API's queue
object (``replication``) says what /metrics says. A learner's lag is shown too; it is in no
member count."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from streamlet.broker.replication.leader import IN_SYNC_S
from streamlet.client import connect
from streamlet.driver.elector import Members
from tests.broker.test_replication import assign
from tests.support.brokers import BrokerProcess, distinct_ports
from tests.support.scrape import Samples, scrape, value
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]
R = "streamlet_replication_"


def replicated_cluster(tmp_path: Path, broker_factory: Factory
                       ) -> tuple[list[BrokerProcess], list[int], list[int]]:
    """Three members (ids 0..2), each with a metrics and a management API port (returned)."""
    ports = distinct_ports(9)
    peers = ", ".join(f'"127.0.0.1:{p}"' for p in ports[:3])
    brokers = []
    for i in range(3):
        config = tmp_path / f"member{i}.toml"
        config.write_text(f"[cluster]\nmember = {i}\npeers = [{peers}]\n")
        brokers.append(broker_factory(config=config, port=ports[i],
                                      extra_args=["--metrics-port", str(ports[3 + i]),
                                                  "--http-port", str(ports[6 + i])]))
    return brokers, ports[3:6], ports[6:]


def _of(samples: Samples, name: str, member: int | None = None) -> float | None:
    labels = {"vhost": "/", "stream": "s"}
    if member is not None:
        labels["member"] = str(member)
    return value(samples, R + name, **labels)


async def _publish(b: BrokerProcess, n: int, confirmed: bool = True) -> None:
    async with await connect(b.host, b.port) as client:
        producer = await client.producer("s")
        for i in range(n):
            await producer.send(b"x" * 100 + str(i).encode())
        if confirmed:
            await asyncio.wait_for(producer.flush(), 30)


async def test_members_in_sync_and_lag(tmp_path: Path, broker_factory: Factory) -> None:
    brokers, metrics, http = replicated_cluster(tmp_path, broker_factory)
    for b in brokers:
        async with await connect(b.host, b.port) as client:
            await client.create_stream("s")
    assign(brokers, "s", 1, leader=0)
    await _publish(brokers[0], 50)

    async def settled() -> list[Samples] | None:
        scraped = [await scrape(port) for port in metrics]
        lead = scraped[0]
        ok = (_of(lead, "in_sync_members") == 3
              and all(_of(lead, "follower_lag_offsets", m) == 0 for m in (1, 2)))
        return scraped if ok else None

    scraped = await eventually(settled, what="both followers in sync, no lag")
    lead = scraped[0]
    for i, samples in enumerate(scraped):
        assert _of(samples, "epoch") == 1 and _of(samples, "members") == 3
        assert _of(samples, "leader") == (1 if i == 0 else 0)
        assert _of(samples, "elections_total") == (1 if i == 0 else 0)
        assert _of(samples, "membership_changes_total") == 0
        if i:  # only the leader reports in sync and lag
            assert _of(samples, "in_sync_members") is None
            assert _of(samples, "follower_lag_offsets", 0) is None
    for m in (1, 2):
        assert _of(lead, "follower_in_sync", m) == 1
        assert _of(lead, "follower_lag_chunks", m) == 0
        assert _of(lead, "follower_lag_bytes", m) == 0
    # the management API's queue object says the same
    queues = [await asyncio.to_thread(_queue, port) for port in http]
    none = {"offsets": 0, "chunks": 0, "bytes": 0}
    assert queues[0]["replication"] == {"epoch": 1, "member_ids": [0, 1, 2], "leads": True,
                                        "in_sync": [0, 1, 2], "lag": {"1": none, "2": none}}
    assert queues[1]["replication"] == {"epoch": 1, "member_ids": [0, 1, 2], "leads": False,
                                        "in_sync": None, "lag": None}

    # member 2 stopped: members 0 and 1 go on confirming; 2's lag grows, it leaves the in-sync set
    stopped = brokers[2]
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        await _publish(brokers[0], 50)
        samples = await scrape(metrics[0])
        first = _of(samples, "follower_lag_offsets", 2)
        assert first is not None and first >= 50
        assert (_of(samples, "follower_lag_chunks", 2) or 0) >= 1
        assert (_of(samples, "follower_lag_bytes", 2) or 0) >= 50 * 100
        assert _of(samples, "follower_lag_offsets", 1) == 0
        await _publish(brokers[0], 50)

        async def behind() -> Samples | None:
            samples = await scrape(metrics[0])
            return samples if _of(samples, "in_sync_members") == 2 else None

        samples = await eventually(behind, timeout=IN_SYNC_S + 30,
                                   what="the stopped follower out of sync")
        assert _of(samples, "follower_in_sync", 2) == 0
        assert _of(samples, "follower_in_sync", 1) == 1
        assert (_of(samples, "follower_lag_offsets", 2) or 0) >= first + 50, "its lag grew"
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    await eventually(settled, what="the follower caught up and in sync again")

    # a member set change: epoch 2 of members 0 and 1, member 0 kept leading
    assign(brokers[:2], "s", 2, leader=0, ids=[0, 1])

    async def changed() -> list[Samples] | None:
        scraped = [await scrape(port) for port in metrics[:2]]
        return scraped if all(_of(s, "epoch") == 2 for s in scraped) else None

    lead, follower = await eventually(changed, what="epoch 2 on members 0 and 1")
    assert _of(lead, "members") == 2 and _of(follower, "members") == 2
    assert _of(lead, "elections_total") == 2, "epoch 2 assigned to lead as well"
    assert _of(lead, "membership_changes_total") == 1
    assert _of(follower, "membership_changes_total") == 1
    assert _of(follower, "elections_total") == 0
    await eventually(lambda: _in_sync(metrics[0], 2), what="two members in sync")
    assert _of(await scrape(metrics[0]), "follower_lag_offsets", 2) is None, "no member now"

    # member 2 made a learner in epoch 2: its lag is shown, it is in no member count
    driver = Members(lambda m: (brokers[m].host, brokers[m].port))
    assert await driver.learn(0, "s", 2, 2)
    await _publish(brokers[0], 20)

    async def learning() -> Samples | None:
        samples = await scrape(metrics[0])
        return samples if _of(samples, "follower_lag_offsets", 2) == 0 else None

    samples = await eventually(learning, what="the learner's lag shown, and 0")
    assert _of(samples, "follower_lag_bytes", 2) == 0
    assert _of(samples, "follower_in_sync", 2) is None
    assert _of(samples, "in_sync_members") == 2 and _of(samples, "members") == 2
    queue = await asyncio.to_thread(_queue, http[0])
    assert queue["replication"]["in_sync"] == [0, 1]
    assert set(queue["replication"]["lag"]) == {"1", "2"}


def _queue(port: int) -> Any:
    r = requests.get(f"http://127.0.0.1:{port}/api/queues/%2F/s", auth=("guest", "guest"),
                     timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


async def _in_sync(port: int, n: int) -> bool:
    return _of(await scrape(port), "in_sync_members") == n
