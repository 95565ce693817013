"""Stream resources: placement, creation on the broker, status, finalizer, refusals, repair."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY
from rstream import AMQPMessage, Producer

from streamlet_operator.constants import FINALIZER
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.test_broker import broker_body, condition


def stream_body(namespace: str, name: str, broker: str = "b", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Stream",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"broker": broker, **spec}}


async def running_broker(kube: Kube, kubelet: Kubelet, namespace: str, replicas: int,
                         name: str = "b") -> None:
    await kube.create(broker_body(namespace, name, replicas=replicas))
    await eventually(lambda: kube.get("StatefulSet", namespace, name), what="StatefulSet")
    await kubelet.sync(namespace, name)


async def ready(kube: Kube, namespace: str, name: str, reason: str = "StreamReady",
                status: str = "True") -> dict[str, Any]:
    async def check() -> Any:
        s = await kube.get("Stream", namespace, name)
        cond = condition(s, "Ready")
        return s if (cond.get("status"), cond.get("reason")) == (status, reason) else None

    result: dict[str, Any] = await eventually(check, what=f"Stream {name} Ready={status} {reason}")
    return result


async def two_pods_and_a_stream_on_b1(kube: Kube, kubelet: Kubelet, namespace: str,
                                       name: str) -> list[Any]:
    """A Broker ``b`` of two pods that moves streams on scale-down, a Stream ``stays`` on b-0 and
    the Stream ``name`` on b-1 (the one a scale-down to one pod moves); the pods' addresses."""
    await kube.create({"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
                       "metadata": {"name": "b", "namespace": namespace},
                       "spec": {"replicas": 2, "scaleDownPolicy": "MoveStreams"}})
    await eventually(lambda: kube.get("StatefulSet", namespace, "b"))
    pods: list[Any] = await kubelet.sync(namespace, "b")
    await kube.create(stream_body(namespace, "stays"))
    await ready(kube, namespace, "stays")
    await kube.create(stream_body(namespace, name))
    assert (await ready(kube, namespace, name))["status"]["leader"] == "b-1"
    return pods


async def gone(kube: Kube, kind: str, namespace: str, name: str) -> None:
    async def check() -> bool:
        return await kube.get(kind, namespace, name) is None

    await eventually(check, what=f"{kind} {name} deleted")


@pytest.mark.process
async def test_replicas_reach_the_broker_as_initial_cluster_size(
        cluster: Cluster, kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    """spec.replicas 3 on 3 pods: the Create the placed pod receives asks for 3 members; the
    Broker's default applies to a Stream without replicas; 3 copies on a 2-pod Broker wait,
    with a reason, until it has 3 pods."""
    await kube.create(broker_body(namespace, "b", replicas=3, streams={"defaultReplicas": 3}))
    await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
    await kubelet.sync(namespace, "b")
    await kube.create(stream_body(namespace, "orders", replicas=3, retention={"maxAge": "1D"}))
    await kube.create(stream_body(namespace, "defaulted"))
    await kube.create(stream_body(namespace, "single", replicas=1))
    for name in ("orders", "defaulted", "single"):
        await ready(kube, namespace, name)
    sent = {name: (address, args) for address, name, args in cluster.admin.creates
            if address in {cluster.pods.pods[(namespace, "b", i)] for i in range(3)}}
    st = (await ready(kube, namespace, "orders"))["status"]
    assert sent["orders"] == (cluster.pods.pods[(namespace, "b", st["placement"][0]["ordinal"])],
                              {"max-age": "1D", "initial-cluster-size": "3"})
    assert sent["defaulted"][1] == {"initial-cluster-size": "3"}
    assert sent["single"][1] == {}
    assert st["applied"]["replicas"] == 3 and st["applied"]["arguments"] == {"max-age": "1D"}

    await running_broker(kube, kubelet, namespace, replicas=2, name="small")
    await kube.create(stream_body(namespace, "wide", broker="small", replicas=3))
    s = await ready(kube, namespace, "wide", reason="NotEnoughPods", status="False")
    assert s["status"]["phase"] == "Pending" and "has 2" in condition(s, "Ready")["message"]
    await kube.patch("Broker", namespace, "small", {"spec": {"replicas": 3}})
    await eventually(lambda: _replicas_are(kube, namespace, "small", 3), what="3 pods")
    await kubelet.sync(namespace, "small")
    await ready(kube, namespace, "wide")
    assert any(name == "wide" and args == {"initial-cluster-size": "3"}
               for _, name, args in cluster.admin.creates)


async def _replicas_are(kube: Kube, namespace: str, name: str, replicas: int) -> bool:
    sts = await kube.get("StatefulSet", namespace, name)
    return sts is not None and sts["spec"]["replicas"] == replicas


@pytest.mark.process
async def test_stream_is_created_on_its_pod(cluster: Cluster, kube: Kube, kubelet: Kubelet,
                                            namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=2)
    await kube.create(stream_body(namespace, "orders",
                                  retention={"maxAge": "1D"}, filterSizeBytes=32))
    s = await ready(kube, namespace, "orders")
    st = s["status"]
    assert st["leader"] == "b-0" and st["partitions"] == 1
    assert st["placement"] == [{"stream": "orders", "pod": "b-0", "ordinal": 0}]
    assert st["applied"]["arguments"] == {"max-age": "1D", "stream-filter-size-bytes": "32"}
    assert st["observedGeneration"] == s["metadata"]["generation"]
    assert FINALIZER in s["metadata"]["finalizers"]
    assert await cluster.probe.exists(cluster.pods.pods[(namespace, "b", 0)], "orders")
    assert not await cluster.probe.exists(cluster.pods.pods[(namespace, "b", 1)], "orders")


@pytest.mark.process
async def test_placement_balances_stream_counts(cluster: Cluster, kube: Kube, kubelet: Kubelet,
                                                namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=3)
    # Created all at once: placements made before kopf's index sees them must count too.
    names = [f"s{i}" for i in range(6)]
    await asyncio.gather(*(kube.create(stream_body(namespace, n)) for n in names))
    pods = [(await ready(kube, namespace, n))["status"]["leader"] for n in names]
    assert sorted(pods) == ["b-0", "b-0", "b-1", "b-1", "b-2", "b-2"]

    async def counts() -> Any:
        b = await kube.get("Broker", namespace, "b")
        per_pod = (b or {}).get("status", {}).get("streams")
        return per_pod if per_pod == {"b-0": 2, "b-1": 2, "b-2": 2} else None

    await eventually(counts, what="Broker status counts streams per pod")


@pytest.mark.process
async def test_stream_waits_for_its_broker(kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    await kube.create(stream_body(namespace, "early", broker="later"))
    s = await ready(kube, namespace, "early", reason="BrokerNotFound", status="False")
    assert "'later' does not exist" in condition(s, "Ready")["message"]
    await kube.create(broker_body(namespace, "later"))
    s = await ready(kube, namespace, "early", reason="BrokerUnavailable", status="False")
    await eventually(lambda: kube.get("StatefulSet", namespace, "later"))
    await kubelet.sync(namespace, "later")
    s = await ready(kube, namespace, "early")
    assert s["status"]["leader"] == "later-0"


@pytest.mark.process
async def test_delete_removes_the_stream_from_its_broker(cluster: Cluster, kube: Kube,
                                                         kubelet: Kubelet, namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=1)
    await kube.create(stream_body(namespace, "doomed"))
    await ready(kube, namespace, "doomed")
    pod = cluster.pods.pods[(namespace, "b", 0)]
    assert await cluster.probe.exists(pod, "doomed")
    await kube.delete("Stream", namespace, "doomed")
    await gone(kube, "Stream", namespace, "doomed")
    assert not await cluster.probe.exists(pod, "doomed")


@pytest.mark.process
async def test_retain_keeps_the_stream(cluster: Cluster, kube: Kube, kubelet: Kubelet,
                                       namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=1)
    await kube.create(stream_body(namespace, "kept", deletionPolicy="retain"))
    await ready(kube, namespace, "kept")
    await kube.delete("Stream", namespace, "kept")
    await gone(kube, "Stream", namespace, "kept")
    assert await cluster.probe.exists(cluster.pods.pods[(namespace, "b", 0)], "kept")


@pytest.mark.process
async def test_immutable_change_is_refused(kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=1)
    await kube.create(stream_body(namespace, "fixed", filterSizeBytes=32))
    await ready(kube, namespace, "fixed")
    await kube.patch("Stream", namespace, "fixed", {"spec": {"filterSizeBytes": 64}})
    s = await ready(kube, namespace, "fixed", reason="ImmutableFieldChanged", status="False")
    message = condition(s, "Ready")["message"]
    assert "spec.filterSizeBytes" in message and "'64'" in message
    assert "delete and re-create" in message
    assert s["status"]["applied"]["arguments"] == {"stream-filter-size-bytes": "32"}
    # Changing it back is accepted again.
    await kube.patch("Stream", namespace, "fixed", {"spec": {"filterSizeBytes": 32}})
    await ready(kube, namespace, "fixed")


@pytest.mark.process
async def test_scale_down_is_refused_while_pods_hold_streams(
        kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=2)
    await kube.create(stream_body(namespace, "first"))
    await ready(kube, namespace, "first")
    await kube.create(stream_body(namespace, "second"))
    assert (await ready(kube, namespace, "second"))["status"]["leader"] == "b-1"

    await kube.patch("Broker", namespace, "b", {"spec": {"replicas": 1}})

    async def blocked() -> Any:
        b = await kube.get("Broker", namespace, "b")
        cond = condition(b, "ScaleDownBlocked")
        return b if cond.get("status") == "True" else None

    b = await eventually(blocked, what="ScaleDownBlocked")
    assert "second (pod 1)" in condition(b, "ScaleDownBlocked")["message"]
    assert b["status"]["phase"] == "ScaleDownBlocked"
    sts = await kube.get("StatefulSet", namespace, "b")
    assert sts is not None and sts["spec"]["replicas"] == 2

    async def blocked_events() -> list[dict[str, Any]]:
        return [e for e in await kube.list("Event", namespace)
                if e.get("reason") == "ScaleDownBlocked"
                and e["involvedObject"]["kind"] == "Broker"]
    events = await eventually(blocked_events, what="a ScaleDownBlocked Event")
    assert events[0]["type"] == "Warning" and "second (pod 1)" in events[0]["message"]

    await kube.delete("Stream", namespace, "second")
    await gone(kube, "Stream", namespace, "second")

    async def scaled() -> Any:
        sts = await kube.get("StatefulSet", namespace, "b")
        return sts if sts and sts["spec"]["replicas"] == 1 else None

    await eventually(scaled, what="scale-down applied once pod 1 holds no stream")
    b = await eventually(lambda: kube.get("Broker", namespace, "b"))
    await eventually(
        lambda: _cond_status(kube, namespace, "ScaleDownBlocked", "False"), what="unblocked")
    assert len(await blocked_events()) == 1  # one as it started, none for the passes after


async def _cond_status(kube: Kube, namespace: str, type_: str, status: str) -> bool:
    return condition(await kube.get("Broker", namespace, "b"), type_).get("status") == status


@pytest.mark.process
async def test_missing_stream_is_recreated(cluster: Cluster, kube: Kube, kubelet: Kubelet,
                                           namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=1)
    await kube.create(stream_body(namespace, "drifty"))
    await ready(kube, namespace, "drifty")
    pod = cluster.pods.pods[(namespace, "b", 0)]
    before = REGISTRY.get_sample_value(
        "streamlet_operator_drift_repairs_total", {"namespace": namespace}) or 0.0

    await cluster.probe.delete(pod, "drifty")  # someone deletes it behind the operator's back

    async def back() -> bool:
        return await cluster.probe.exists(pod, "drifty")

    await eventually(back, what="stream re-created by the timer")

    async def counted() -> Any:
        return REGISTRY.get_sample_value(
            "streamlet_operator_drift_repairs_total", {"namespace": namespace})

    assert await eventually(counted, what="drift repair counted") == before + 1

    async def event() -> Any:
        events = await kube.list("Event", namespace)
        return [e for e in events if e.get("reason") == "StreamRecreated"]

    found = await eventually(event, what="a StreamRecreated event")
    assert "drifty was missing on b-0" in found[0]["message"]


@pytest.mark.process
async def test_pod_restart_keeps_the_stream(cluster: Cluster, kube: Kube, kubelet: Kubelet,
                                            namespace: str) -> None:
    """A pod that dies makes the Stream Degraded; back on its volume, the stream is found as it
    was (not re-created)."""
    await running_broker(kube, kubelet, namespace, replicas=1)
    await kube.create(stream_body(namespace, "durable"))
    await ready(kube, namespace, "durable")
    async with Producer(*cluster.pods.pods[(namespace, "b", 0)], username="guest",
                        password="guest") as producer:
        for i in range(10):
            await producer.send_wait("durable", AMQPMessage(body=b"x%d" % i))
    repairs = REGISTRY.get_sample_value(
        "streamlet_operator_drift_repairs_total", {"namespace": namespace}) or 0.0

    kubelet.kill(namespace, "b", 0)
    s = await ready(kube, namespace, "durable", reason="BrokerUnavailable", status="False")
    assert s["status"]["phase"] == "Degraded"
    kubelet.restart(namespace, "b", 0)

    async def caught_up() -> Any:
        s = await kube.get("Stream", namespace, "durable")
        st = (s or {}).get("status") or {}
        ok = condition(s, "Ready").get("status") == "True" and st.get("lastOffset", -1) >= 0
        return st if ok else None

    status = await eventually(caught_up, what="Ready again with its messages")
    assert status["firstOffset"] == 0
    assert (REGISTRY.get_sample_value(
        "streamlet_operator_drift_repairs_total", {"namespace": namespace}) or 0.0) == repairs


@pytest.mark.process
async def test_super_stream_partitions_share_a_pod(cluster: Cluster, kube: Kube,
                                                   kubelet: Kubelet, namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=2)
    await kube.create(stream_body(namespace, "invoices", partitions=3))
    s = await ready(kube, namespace, "invoices")
    assert s["status"]["partitions"] == 3
    assert [p["stream"] for p in s["status"]["placement"]] == [
        "invoices-0", "invoices-1", "invoices-2"]
    pod = cluster.pods.pods[(namespace, "b", 0)]
    for i in range(3):
        assert await cluster.probe.exists(pod, f"invoices-{i}")
    # Three streams on pod 0: the next stream goes to pod 1.
    await kube.create(stream_body(namespace, "single"))
    assert (await ready(kube, namespace, "single"))["status"]["leader"] == "b-1"
    await kube.delete("Stream", namespace, "invoices")
    await gone(kube, "Stream", namespace, "invoices")
    assert not await cluster.probe.exists(pod, "invoices-0")


async def test_reconciliations_are_counted(kube: Kube, namespace: str) -> None:
    """Counted here, not left to the tests before it (under xdist they ran in another process)."""
    def sample(name: str, kind: str) -> float:
        return REGISTRY.get_sample_value(name, {"kind": kind, "handler": "change"}) or 0.0

    total, timed = "streamlet_operator_reconciliations_total", \
        "streamlet_operator_reconciliation_duration_seconds_count"
    streams, brokers = sample(total, "Stream"), sample(timed, "Broker")
    await kube.create(broker_body(namespace, "b", replicas=1))
    await kube.create(stream_body(namespace, "counted"))
    await eventually(lambda: sample(total, "Stream") > streams, what="a Stream reconciliation")
    await eventually(lambda: sample(timed, "Broker") > brokers, what="a timed Broker one")




@pytest.mark.process
async def test_never_created_stream_does_not_block_scale_down(
        kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=2)
    kubelet.kill(namespace, "b", 1)  # pod 1 is down: a stream placed there waits
    await kube.create(stream_body(namespace, "first"))
    await ready(kube, namespace, "first")
    await kube.create(stream_body(namespace, "second"))
    waiting = await ready(kube, namespace, "second", reason="BrokerUnavailable", status="False")
    assert waiting["status"]["leader"] == "b-1" and "applied" not in waiting["status"]

    await kube.patch("Broker", namespace, "b", {"spec": {"replicas": 1}})
    assert (await ready(kube, namespace, "second"))["status"]["leader"] == "b-0"

    async def scaled() -> Any:
        sts = await kube.get("StatefulSet", namespace, "b")
        return sts if sts and sts["spec"]["replicas"] == 1 else None

    await eventually(scaled, what="scale-down not blocked by a stream never created")
