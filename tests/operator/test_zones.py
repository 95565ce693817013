"""Zones, end to end: four real broker pods on Nodes labelled with topology.kubernetes.io/zone,
the real operator against the emulated API server. A member added to a replicated stream goes
to the zone the stream has no member in, not to the lowest free pod."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamlet_operator import names
from streamlet_operator.builders.statefulset import TEMPLATE_HASH
from streamlet_operator.kube import Kube
from streamlet_operator.placement import ZONE_LABEL
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.peers import PeeredLauncher, delete_streams, stop_pods
from tests.operator.test_replicated import record_of, replication
from tests.operator.test_stream import stream_body

pytestmark = pytest.mark.process

PODS = 4
#: pod ordinal -> its Node's zone: pods 1 and 2 share zone b
ZONES = {0: "a", 1: "b", 2: "b", 3: "c"}
CHANGE_S = 60


@pytest.fixture
async def zoned(cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path
                ) -> AsyncIterator[Kubelet]:
    """Broker ``b`` of four peered pods, each a Ready Pod object on its own Node labelled
    with its zone (ZONES); stopped when the test ends."""
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", PODS)
    kubelet = Kubelet(kube, cluster.pods, launcher)
    try:
        await kube.create({"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
                           "metadata": {"name": "b", "namespace": namespace},
                           "spec": {"replicas": PODS}})
        sts = await eventually(lambda: kube.get("StatefulSet", namespace, "b"),
                               what="StatefulSet")
        revision = sts["spec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH]
        await kubelet.sync(namespace, "b")
        for ordinal, zone in ZONES.items():
            node = f"{namespace}-n{ordinal}"
            await kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": node, "labels": {ZONE_LABEL: zone}}})
            pod = names.pod("b", ordinal)
            await kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": pod, "namespace": namespace, "labels": names.selector("b"),
                "annotations": {TEMPLATE_HASH: revision}},
                "spec": {"nodeName": node, "containers": [{"name": "broker", "image": "x"}]}})
            await kube.patch("Pod", namespace, pod, {"status": {"conditions": [
                {"type": "Ready", "status": "True"}]}}, subresource="status")
        yield kubelet
        await delete_streams(kube, namespace)
    finally:
        stop_pods(cluster.pods.pods, launcher, namespace)
        for ordinal in ZONES:
            await kube.delete("Node", "", f"{namespace}-n{ordinal}")


async def test_an_added_member_goes_to_the_zone_without_one(
        kube: Kube, namespace: str, zoned: Kubelet) -> None:
    await kube.create(stream_body(namespace, "orders", replicas=2))
    stream = await replication(kube, namespace, "orders",
                               lambda r: r.phase == "Ready" and len(r.in_sync) == 2)
    assert record_of(stream).members == (0, 1)  # zones a and b (the Create's placement)
    await kube.patch("Stream", namespace, "orders", {"spec": {"replicas": 3}})
    stream = await replication(
        kube, namespace, "orders",
        lambda r: len(r.members) == 3 and r.changing is None and r.phase == "Ready",
        timeout=CHANGE_S, what="three members")
    # pod 3 (zone c), not pod 2 (the lowest free one, in zone b with member 1)
    assert record_of(stream).members == (0, 1, 3)
    assert {ZONES[m] for m in record_of(stream).members} == {"a", "b", "c"}


async def test_a_new_streams_members_are_placed_in_distinct_zones(
        kube: Kube, namespace: str, zoned: Kubelet) -> None:
    """The operator writes the pods' zones into the stream directory; the broker taking the
    Create places the members over them: three members in zones a, b and c, never both pods of
    zone b."""
    async def zones_written() -> bool:
        cm = await kube.get("ConfigMap", namespace, names.directory_configmap("b"))
        text = ((cm or {}).get("data") or {}).get(names.DIRECTORY_KEY) or "{}"
        return json.loads(text).get("zones") == {str(o): z for o, z in ZONES.items()}
    await eventually(zones_written, what="the pods' zones in the directory")
    await zoned.sync_directory(namespace, "b")  # the pods' file, as the kubelet refreshes it
    await kube.create(stream_body(namespace, "audit", replicas=3))
    stream = await replication(kube, namespace, "audit",
                               lambda r: r.phase == "Ready" and len(r.in_sync) == 3)
    assert {ZONES[m] for m in record_of(stream).members} == {"a", "b", "c"}
