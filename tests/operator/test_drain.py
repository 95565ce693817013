"""Draining a pod, end to end: three real peered broker processes as pods (Pod objects from
the test's StatefulSet controller), a replicated Stream and single-replica ones, the real
operator against the emulated API server.

The pod that leads the replicated Stream and holds a single-replica one is annotated
``streamlet.dev/drain=true`` while a named producer publishes to the leader (resending what
was not confirmed): the leadership moves to another in-sync member, the single-replica stream
moves to another pod, the Broker's Drained condition ends True, a new Stream is not placed
there, and every confirmed message is in the stream once, in order. With the annotation
removed, the condition goes and the pod takes new streams again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streamlet.client import connect
from streamlet_operator import names
from streamlet_operator.drain import DRAIN
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.peers import PeeredLauncher
from tests.operator.statefulset import StatefulSetController
from tests.operator.test_broker import condition
from tests.operator.test_replicated import record_of, replication
from tests.operator.test_replicated import replicated_stream as replicated_stream  # noqa: F401
from tests.operator.test_roll import Producer, _pods_up
from tests.operator.test_stream import ready, stream_body

pytestmark = pytest.mark.process

STEP = 300  # confirms before the drain, and after it
DRAIN_S = 180  # a transfer and a move, on two loaded cores


async def _drained(kube: Kube, namespace: str, status: str) -> dict[str, Any]:
    async def look() -> Any:
        b = await kube.get("Broker", namespace, "b")
        return b if condition(b, "Drained").get("status") == status else None
    found: dict[str, Any] = await eventually(look, timeout=DRAIN_S, what=f"Drained={status}")
    return found


async def _pod_of(kube: Kube, namespace: str, name: str) -> str:
    stream = await ready(kube, namespace, name)
    return str(stream["status"]["leader"])


async def test_a_drain_moves_a_leadership_and_a_stream_off_the_pod(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:  # noqa: F811
    kubelet, launcher, stream = replicated_stream
    leader = record_of(stream).leader
    assert leader is not None
    pod = names.pod("b", leader)
    # Single-replica streams until one lands on the leader's pod (the fewest streams first).
    singles: dict[str, str] = {}
    for i in range(6):
        await kube.create(stream_body(namespace, f"s{i}"))
        singles[f"s{i}"] = await _pod_of(kube, namespace, f"s{i}")
        if singles[f"s{i}"] == pod:
            break
    moved = next(n for n, p in singles.items() if p == pod)

    producer = Producer(cluster, kube, namespace)
    controller = StatefulSetController(kube, cluster.pods, launcher, namespace, "b")
    async with controller.running(), kubelet.delivering_directory(namespace, "b"), \
            producer.running():
        await eventually(lambda: _pods_up(kube, namespace), what="the Pod objects")
        await producer.at_least(STEP, "confirms before the drain")
        await kube.patch("Pod", namespace, pod, {"metadata": {"annotations": {DRAIN: "true"}}})
        broker = await _drained(kube, namespace, "True")
        message = condition(broker, "Drained")["message"]
        assert f"nothing leads or is placed on {pod}" in message, message
        record = record_of(await kube.get("Stream", namespace, "orders") or {})
        assert record.leader is not None and record.leader != leader, record
        assert record.reason == "Transferred", record
        await producer.at_least(len(producer.confirmed) + STEP, "confirms after the drain")

    # The single-replica stream left the pod, and the pod holds no copy of it.
    after = await ready(kube, namespace, moved)
    assert after["status"]["leader"] != pod and not after["status"].get("move")
    address = cluster.pods.pods[(namespace, "b", leader)]
    assert not await cluster.probe.exists(address, moved)
    # Nothing new goes there (it holds the fewest streams now).
    await kube.create(stream_body(namespace, "new"))
    assert await _pod_of(kube, namespace, "new") != pod

    n = producer.sent
    assert producer.confirmed == set(range(1, n + 1)) and n >= 2 * STEP
    async with await connect(*cluster.pods.pods[(namespace, "b", record.leader)]) as client:
        consumer = await client.consumer("orders", "first", credit=100)
        bodies = [int((await asyncio.wait_for(consumer.__anext__(), 30)).body)
                  for _ in range(n)]
    assert bodies == list(range(1, n + 1)), "every confirmed message once, in order"
    await _events(kube, namespace, "DrainStarted", "DrainComplete")

    # The annotation removed: the condition goes and the pod takes streams again.
    await kube.patch("Pod", namespace, pod, {"metadata": {"annotations": {DRAIN: None}}})

    async def undrained() -> Any:
        b = await kube.get("Broker", namespace, "b")
        return b if not condition(b, "Drained") else None
    await eventually(undrained, timeout=DRAIN_S, what="the Drained condition gone")
    await kube.create(stream_body(namespace, "again"))
    assert await _pod_of(kube, namespace, "again") == pod
    await _events(kube, namespace, "DrainEnded")


async def _events(kube: Kube, namespace: str, *wanted: str) -> None:
    """The Broker's Events name every reason ``wanted`` (posted after the condition changes:
    polled, not read once)."""
    async def posted() -> bool:
        reasons = {e["reason"] for e in await kube.list("Event", namespace)
                   if e["involvedObject"]["kind"] == "Broker"}
        return set(wanted) <= reasons
    await eventually(posted, timeout=DRAIN_S, what=f"the Events {', '.join(wanted)}")


async def test_a_drain_on_the_broker_waits_for_a_member_out_of_sync(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:  # noqa: F811
    """Ordinals on the Broker: draining a follower while another member is stopped would
    leave the stream without a quorum in sync elsewhere: Drained stays False and says so,
    until the stopped member is back."""
    _, launcher, stream = replicated_stream
    record = record_of(stream)
    followers = [m for m in record.members if m != record.leader]
    drained, stopped = followers
    address = cluster.pods.pods[(namespace, "b", stopped)]
    launcher.pause(address)
    try:
        await replication(kube, namespace, "orders", lambda r: stopped not in r.in_sync,
                          what="the stopped member out of sync")
        await kube.patch("Broker", namespace, "b",
                         {"metadata": {"annotations": {DRAIN: str(drained)}}})
        broker = await _drained(kube, namespace, "False")
        assert "orders (1 member(s) in sync elsewhere, 2 needed)" in condition(
            broker, "Drained")["message"]
    finally:
        launcher.pause(address, paused=False)
    broker = await _drained(kube, namespace, "True")
    assert "quorum in sync elsewhere: orders" in condition(broker, "Drained")["message"]
