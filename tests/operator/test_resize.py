"""Growing a Broker's volumes, end to end: the real operator against the emulated API server,
real broker processes as pods, PVCs made by the test's kubelet from the volumeClaimTemplates,
and the test as the CSI resizer (it reports the new capacity).

With an expandable StorageClass, a larger spec.storage.size patches every PVC and the
StatefulSet is made again with it (a new object: the old one was deleted with its pods
orphaned) while the pods keep running, the same processes and Pod objects; StorageResized
says how far the resize is. A class that does not allow expansion, and a smaller size, leave
everything as it was and say why.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from streamlet_operator import names
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.test_broker import condition
from tests.operator.test_stream import stream_body

pytestmark = pytest.mark.process

HELD_S = 5  # how long a refused change is watched doing nothing


async def _broker(kube: Kube, kubelet: Kubelet, namespace: str, expandable: bool
                  ) -> tuple[str, dict[str, Any]]:
    """A StorageClass of the namespace's own, Broker ``b`` of two pods on 1Gi volumes of it,
    running, with Pod objects; the class's name and the StatefulSet."""
    cls = f"{namespace}-class"
    await kube.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                       "metadata": {"name": cls}, "provisioner": "test.streamlet.dev",
                       "allowVolumeExpansion": expandable})
    await kube.create({"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
                       "metadata": {"name": "b", "namespace": namespace},
                       "spec": {"replicas": 2,
                                "storage": {"size": "1Gi", "storageClassName": cls}}})
    await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
    await kubelet.sync(namespace, "b")
    for ordinal in range(2):
        await kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": names.pod("b", ordinal), "namespace": namespace,
            "labels": names.labels("b")}})
    sts = await kube.get("StatefulSet", namespace, "b")
    assert sts is not None
    return cls, sts


async def _claims(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return [c for c in [await kube.get("PersistentVolumeClaim", namespace, f"data-b-{o}")
                        for o in range(2)] if c is not None]


def _requested(claim: dict[str, Any]) -> str:
    return str(claim["spec"]["resources"]["requests"]["storage"])


def _template(sts: dict[str, Any]) -> str:
    return str(sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]
               ["storage"])


async def _resized(kube: Kube, namespace: str, status: str, reason: str,
                   says: str = "") -> dict[str, Any]:
    async def look() -> Any:
        b = await kube.get("Broker", namespace, "b")
        c = condition(b, "StorageResized")
        return b if (c.get("status"), c.get("reason")) == (status, reason) and says in c.get(
            "message", "") else None
    found: dict[str, Any] = await eventually(look, timeout=60,
                                             what=f"StorageResized={status} {reason} {says}")
    return found


async def _pods(cluster: Cluster, kube: Kube, namespace: str) -> dict[int, tuple[Any, str]]:
    """Each pod's broker process id and Pod uid."""
    result = {}
    for ordinal in range(2):
        address = cluster.pods.pods[(namespace, "b", ordinal)]
        proc = cluster.launcher.procs[address].proc
        assert proc is not None and proc.poll() is None
        pod = await kube.get("Pod", namespace, names.pod("b", ordinal))
        assert pod is not None and not pod["metadata"].get("deletionTimestamp")
        result[ordinal] = (proc.pid, pod["metadata"]["uid"])
    return result


async def test_growing_storage_patches_the_claims_and_replaces_the_statefulset(
        cluster: Cluster, kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    _, sts = await _broker(kube, kubelet, namespace, expandable=True)
    assert [_requested(c) for c in await _claims(kube, namespace)] == ["1Gi", "1Gi"]
    await kube.create(stream_body(namespace, "kept"))
    before = await _pods(cluster, kube, namespace)

    await kube.patch("Broker", namespace, "b", {"spec": {"storage": {"size": "2Gi"}}})

    async def replaced() -> Any:
        now = await kube.get("StatefulSet", namespace, "b")
        return now if now and now["metadata"]["uid"] != sts["metadata"]["uid"] else None
    made = await eventually(replaced, timeout=60, what="the StatefulSet made again")
    assert _template(made) == "2Gi"
    assert made["spec"]["replicas"] == 2
    assert [_requested(c) for c in await _claims(kube, namespace)] == ["2Gi", "2Gi"]
    await _resized(kube, namespace, "False", "Resizing", "0 of 2 done")
    await kubelet.sync(namespace, "b")  # the new StatefulSet adopts the running pods

    # The resizer: data-b-0 grown, its file system waiting; data-b-1 not yet.
    await kube.patch("PersistentVolumeClaim", namespace, "data-b-0", {"status": {
        "capacity": {"storage": "2Gi"},
        "conditions": [{"type": "FileSystemResizePending", "status": "True"}]}},
        subresource="status")
    await _resized(kube, namespace, "False", "Resizing", "pending on data-b-0")
    for claim in ("data-b-0", "data-b-1"):
        await kube.patch("PersistentVolumeClaim", namespace, claim, {"status": {
            "capacity": {"storage": "2Gi"}, "conditions": []}}, subresource="status")
    await _resized(kube, namespace, "True", "Resized", "2 of 2 volumes at 2Gi")

    assert await _pods(cluster, kube, namespace) == before, "the pods kept running"
    events = [e["reason"] for e in await kube.list("Event", namespace)
              if e["involvedObject"]["kind"] == "Broker"]
    assert "Resizing" in events and "Resized" in events, events
    assert await cluster.probe.exists(cluster.pods.pods[(namespace, "b", 0)], "kept") or \
        await cluster.probe.exists(cluster.pods.pods[(namespace, "b", 1)], "kept")


async def test_a_class_without_expansion_and_a_shrink_change_nothing(
        cluster: Cluster, kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    cls, sts = await _broker(kube, kubelet, namespace, expandable=False)
    before = await _pods(cluster, kube, namespace)

    async def unchanged() -> None:
        deadline = time.monotonic() + HELD_S
        while time.monotonic() < deadline:
            now = await kube.get("StatefulSet", namespace, "b")
            assert now is not None and now["metadata"]["uid"] == sts["metadata"]["uid"]
            assert _template(now) == "1Gi"
            assert [_requested(c) for c in await _claims(kube, namespace)] == ["1Gi", "1Gi"]
            await asyncio.sleep(0.2)

    await kube.patch("Broker", namespace, "b", {"spec": {"storage": {"size": "2Gi"}}})
    broker = await _resized(kube, namespace, "False", "ExpansionNotSupported")
    assert f"StorageClass {cls!r} does not allow volume expansion" in condition(
        broker, "StorageResized")["message"]
    await unchanged()
    warnings = [e for e in await kube.list("Event", namespace)
                if e["reason"] == "ExpansionNotSupported"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings

    await kube.patch("Broker", namespace, "b", {"spec": {"storage": {"size": "512Mi"}}})
    broker = await _resized(kube, namespace, "False", "ShrinkRefused")
    assert "cannot shrink" in condition(broker, "StorageResized")["message"]
    await unchanged()
    assert await _pods(cluster, kube, namespace) == before
