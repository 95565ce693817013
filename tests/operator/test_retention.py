"""A Stream's spec.retention changed on a running replicated stream: the operator applies it
as a policy on every pod (real brokers under the emulated API server), each member deletes
the old whole segments the smaller limit no longer keeps, status.retention says what runs,
and changing it back hands the stream its Create arguments again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.client.errors import StreamletError
from streamlet.rabbitmq.constants import STREAM_DETAILS
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.peers import PeeredLauncher, delete_streams, stop_pods
from tests.operator.test_replicated import replication
from tests.operator.test_stream import ready, running_broker, stream_body

pytestmark = pytest.mark.process

SEGMENT = 4096
Address = tuple[str, int]


async def details(address: Address, stream: str) -> dict[str, int]:
    """What the pod's copy runs with and holds (StreamStats with streamlet's details)."""
    client = await connect(*address, properties={STREAM_DETAILS: "true"})
    try:
        return dict(await client.stream_stats(stream))
    finally:
        await client.close()


async def fill(address: Address, stream: str, rounds: int = 40) -> None:
    """``rounds`` confirmed chunks of ten 200-byte messages: about two a 4 KiB segment."""
    client = await connect(*address)
    try:
        producer = await client.producer(stream)
        for r in range(rounds):
            await producer.send_many(b"%06d" % (r * 10 + i) + b"x" * 194 for i in range(10))
            await asyncio.wait_for(producer.flush(), 30)
    finally:
        await client.close()


async def test_a_retention_change_reaches_every_member(cluster: Cluster, kube: Kube,
                                                       namespace: str, tmp_path: Path) -> None:
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", 3)
    try:
        await _changes(cluster, kube, Kubelet(kube, cluster.pods, launcher), namespace)
    finally:
        await delete_streams(kube, namespace)
        stop_pods(cluster.pods.pods, launcher, namespace)


async def _changes(cluster: Cluster, kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=3)
    created = {"maxLengthBytes": 1_000_000_000, "maxSegmentSizeBytes": SEGMENT}
    await kube.create(stream_body(namespace, "logs", replicas=3, retention=created))
    await replication(kube, namespace, "logs", lambda r: r.phase == "Ready"
                      and len(r.in_sync) == 3)
    st = (await ready(kube, namespace, "logs"))["status"]
    pods = [cluster.pods.pods[(namespace, "b", i)] for i in range(3)]
    leader = pods[int(st["leader"].rsplit("-", 1)[1])]
    await fill(leader, "logs")

    async def every_pod(check: Any) -> bool:
        try:
            return all([check(await details(pod, "logs")) for pod in pods])
        except StreamletError:  # a member not made yet
            return False

    await eventually(lambda: every_pod(lambda d: d["segments"] >= 10), timeout=60,
                     what="every member holds every segment")
    assert "retention" not in st

    smaller = {"maxLengthBytes": 3 * SEGMENT, "maxSegmentSizeBytes": SEGMENT}
    await kube.patch("Stream", namespace, "logs", {"spec": {"retention": smaller}})

    async def status_retention() -> Any:
        s = await kube.get("Stream", namespace, "logs")
        return ((s or {}).get("status") or {}).get("retention")

    applied = await eventually(status_retention, timeout=60, what="status.retention")
    assert applied == {"policy": "k8s-stream-logs", "maxAge": "7D",  # the Broker's default
                       "maxLengthBytes": 3 * SEGMENT, "maxSegmentSizeBytes": SEGMENT}
    await eventually(lambda: every_pod(lambda d: d["max_length_bytes"] == 3 * SEGMENT
                                       and d["segments"] <= 4 and d["first_offset"] > 0),
                     timeout=30, what="the smaller retention applied on every member")
    s = await ready(kube, namespace, "logs")  # still Ready, nothing refused
    assert s["status"]["applied"]["arguments"]["max-length-bytes"] == "1000000000"

    # back to what it was created with: the policy goes, the Create arguments run again
    await kube.patch("Stream", namespace, "logs", {"spec": {"retention": created}})
    await eventually(lambda: _no_retention(kube, namespace), timeout=60,
                     what="status.retention removed")
    await eventually(lambda: every_pod(lambda d: d["max_length_bytes"] == 1_000_000_000),
                     timeout=30, what="the Create arguments again on every member")


async def _no_retention(kube: Kube, namespace: str) -> bool:
    s = await kube.get("Stream", namespace, "logs")
    return s is not None and "retention" not in (s.get("status") or {})

