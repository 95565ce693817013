"""``GET /ready`` on real brokers: a standalone broker is ready; a follower with much to copy
from its leader (over a slow link) is not ready until it holds the leader's commit point, then
is, with the same log as the leader."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from streamlet.client import connect
from streamlet.rabbitmq import Code
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from tests.broker.test_replication import Factory, _admin, assign, segment_files
from tests.support.brokers import distinct_ports
from tests.support.faultproxy import FaultProxy, LoopThread
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

BODY = b"x" * 4000
MESSAGES = 2000  # 8 MB: seconds to copy over the slow link
SLOW = 1 << 20  # bytes a second


def ready(port: int) -> tuple[int, str]:
    """The status and body of ``GET /ready`` on the metrics port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=10) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()


async def test_a_standalone_broker_is_ready(broker_factory: Factory) -> None:
    [metrics] = distinct_ports(1)
    broker_factory(extra_args=["--metrics-port", str(metrics)])
    assert await asyncio.to_thread(ready, metrics) == (200, "ready\n")


async def test_a_follower_is_ready_once_caught_up(tmp_path: Path,
                                                  broker_factory: Factory) -> None:
    *ports, m0, m1, m2 = distinct_ports(6)
    metrics = [m0, m1, m2]
    with LoopThread() as thread:
        proxy = thread.run(FaultProxy(ports[0]).start())  # member 2 reaches the leader so
        thread.call(lambda: setattr(proxy, "rate", SLOW))
        brokers = []
        for i in range(3):
            leader = proxy.port if i == 2 else ports[0]
            peers = ", ".join(f'"127.0.0.1:{p}"' for p in [leader, *ports[1:]])
            config = tmp_path / f"member{i}.toml"
            config.write_text(f"[cluster]\nmember = {i}\npeers = [{peers}]\n")
            brokers.append(broker_factory(config=config, port=ports[i],
                                          extra_args=["--metrics-port", str(metrics[i])]))
        for b in brokers:
            async with await connect(b.host, b.port) as c:
                await c.create_stream("r")
        assign(brokers[:2], "r", 1, leader=0, ids=[0, 1, 2])
        async with await connect(brokers[0].host, brokers[0].port) as client:
            producer = await client.producer("r")
            await producer.send_many(BODY for _ in range(MESSAGES))
            await asyncio.wait_for(producer.flush(), 60)  # committed by members 0 and 1
        assert await asyncio.to_thread(ready, m0) == (200, "ready\n"), "a leader is ready"
        await eventually(lambda: ready(m1)[0] == 200, 30, "member 1 in sync")

        answer = _admin(brokers[2], rf.Assign(1, "r", 1, Role.FOLLOWER, "127.0.0.1", proxy.port,
                                              [0, 1, 2]), rf.AssignResponse)
        assert answer.code == Code.OK
        await eventually(lambda: "r: catching up with its leader" in ready(m2)[1], 30,
                         "member 2 copying over the slow link, not ready")
        for _ in range(5):  # not ready while it copies
            status, _body = await asyncio.to_thread(ready, m2)
            assert status == 503
            await asyncio.sleep(0.2)
        thread.call(lambda: setattr(proxy, "rate", None))
        await eventually(lambda: ready(m2) == (200, "ready\n"), 60, "member 2 caught up")
        assert segment_files(brokers[2], "r") == segment_files(brokers[0], "r")
        thread.run(proxy.close())
