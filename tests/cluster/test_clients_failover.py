"""RabbitMQ's own clients through a leader kill in a local cluster (`streamlet cluster up`):
rbfly (PyPI), which knows one broker address and reconnects to it, and the Node.js client
(npm), which reconnects its connections by ``client.restart()``. Their publishers recover by
themselves: the killed broker comes back as a follower and passes their publishers on to the
new leader (broker.replication.relay). A consumer on a replica is not interrupted, and every
confirmed message is in the stream once, in order."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.cluster.test_failover import _create_replicated, _led, _led_after
from tests.cluster.test_local_cluster import HOST, Cluster
from tests.node.test_node_client import node_client  # noqa: F401  (the fixture)
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

NODE_DIR = Path(__file__).parent.parent / "node"


@pytest.fixture
def cluster(tmp_path: Path) -> object:
    c = Cluster(tmp_path / "c", 3).start()
    yield c
    c.stop()


def _kill(cluster: Cluster, node: int) -> None:
    os.kill(cluster.state()["nodes"][node]["pid"], signal.SIGKILL)


async def test_rbfly_through_a_leader_kill(cluster: Cluster) -> None:
    from rbfly.streams import Offset, get_message_ctx, streams_client

    _create_replicated(cluster, "rb")
    await eventually(lambda: _led(cluster, "rb") == (1, 0), timeout=30, what="the driver's record")
    ports, n = cluster.ports(), 600
    # the publisher knows member 0 (the leader) only; the consumer reads on member 2, a replica
    writer = streams_client(f"rabbitmq-stream://guest:guest@{HOST}:{ports[0]}")
    reader = streams_client(f"rabbitmq-stream://guest:guest@{HOST}:{ports[2]}")
    received: list[tuple[int, object]] = []

    async def consume() -> None:
        async for body in reader.subscribe("rb", offset=Offset.FIRST):  # type: ignore[misc]
            received.append((get_message_ctx().stream_offset, body))  # type: ignore[arg-type]

    consuming = asyncio.create_task(consume())
    confirmed: list[object] = []
    try:
        async with writer.publisher("rb", name="rb-app") as publisher:
            for i in range(n):
                body = b"rb-%d" % i
                # rbfly waits for the confirm and, on a lost connection, reconnects and sends
                # again by itself; the application retries only what rbfly gave up on
                while True:
                    try:
                        await asyncio.wait_for(publisher.send(body), 90)
                        break
                    except Exception:  # a timeout too
                        await asyncio.sleep(0.5)
                confirmed.append(body)
                if i == n // 2:
                    _kill(cluster, 0)
        await eventually(lambda: _led_after(cluster, "rb", 1), timeout=30, what="a new leader")
        await eventually(lambda: len(received) >= n, timeout=90,
                         what="the replica's consumer got every confirmed message")
    finally:
        consuming.cancel()
        await asyncio.gather(consuming, return_exceptions=True)
        await writer.disconnect()
        await reader.disconnect()
    bodies = [b for _, b in received]
    assert bodies == confirmed, "each confirmed message once, in order, never interrupted"
    assert [o for o, _ in received] == sorted(o for o, _ in received)


def test_the_node_client_through_a_leader_kill(cluster: Cluster, node_client: Path) -> None:  # noqa: F811
    _create_replicated(cluster, "js")
    asyncio.run(eventually(lambda: _led(cluster, "js") == (1, 0), timeout=30,
                           what="the driver's record"))
    ports = cluster.ports()
    script = NODE_DIR / "failover.js"
    proc = subprocess.Popen(["node", str(script), HOST, str(ports[0]), str(ports[2]), "js", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        half = proc.stdout.readline().strip()
        assert half == "half", f"the script did not get half way ({half!r}): {proc.stderr.read()}"
        _kill(cluster, 0)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = out.strip().splitlines()
    assert lines, f"no report from node (rc {proc.returncode}):\n{err}"
    report = json.loads(lines[-1])
    assert proc.returncode == 0 and "error" not in report, f"{report}\n{err}"
    assert "step: restarted" in err, "the publisher's connection was lost and restarted"
    assert report["confirmed"] == 600
    assert report["received"] == report["confirmed"], report
    assert report["inOrder"] and report["once"], report
    assert report["consumerClosed"] is False, "the consumer on a replica was not interrupted"
