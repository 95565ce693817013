"""A Stream of one copy edited to three and back, end to end: real broker pods (peered), the
real operator against the emulated API server.

``spec.replicas`` 1 -> 3: the one copy is recorded as a one-member replicated stream (epoch 1,
its pod leading) and then grows a member at a time; every message is on all three members.
3 -> 1: two removals, the stream keeps its record with one member and the others drop their
copies. A publisher is confirmed after each step, and its messages read back in order.
A stream shrunk to one member on a drained pod holds the drain until replicas 2 then 1 move it;
on a pod a scale-down removes, its member is moved (never copied) before the pod goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamlet_operator.drain import DRAIN
from streamlet_operator.failover import FORCE_LEADER, ONE_COPY
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually, read_all
from tests.operator.kubelet import ClientProbe, Kubelet
from tests.operator.peers import PeeredLauncher, delete_streams, stop_pods
from tests.operator.test_broker import broker_body, condition
from tests.operator.test_member_changes import CHANGE_S, settled
from tests.operator.test_replicated import publish, record_of, replication
from tests.operator.test_stream import ready, stream_body

pytestmark = pytest.mark.process

#: Messages published at each step (before the growth, after it, after the shrink).
MESSAGES = 100


async def _holds(cluster: Cluster, namespace: str, ordinal: int) -> bool:
    return await ClientProbe().exists(cluster.pods.pods[(namespace, "b", ordinal)], "orders")


async def _every_message_on(cluster: Cluster, namespace: str, members: tuple[int, ...],
                            count: int) -> None:
    expected = [f"m{i}".encode() for i in range(count)]
    for m in members:
        assert await read_all(cluster.pods.pods[(namespace, "b", m)], "orders",
                              count) == expected, f"member {m}"


async def test_one_copy_grows_to_three_and_shrinks_back(
        cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path) -> None:
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", 3)
    kubelet = Kubelet(kube, cluster.pods, launcher)
    try:
        await kube.create(broker_body(namespace, "b", replicas=3))
        await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
        await kubelet.sync(namespace, "b")
        await kube.create(stream_body(namespace, "orders", replicas=1))
        stream = await ready(kube, namespace, "orders")
        holder = int(stream["status"]["placement"][0]["ordinal"])
        assert "replication" not in stream["status"]  # one copy: nothing recorded
        grown = asyncio.create_task(replication(  # watching from before the edit
            kube, namespace, "orders", lambda r: True, timeout=CHANGE_S,
            what="the one copy recorded"))
        await publish(cluster.pods.pods[(namespace, "b", holder)], MESSAGES, 0)

        await kube.patch("Stream", namespace, "orders", {"spec": {"replicas": 3}})
        first = record_of(await grown)  # recorded before any Assign, before any add
        assert (first.epoch, first.leader, first.members) == (1, holder, (holder,))
        assert first.reason == ONE_COPY
        record = await settled(kube, namespace, lambda r: r.members == (0, 1, 2),
                               what="three members")
        assert record.leader == holder  # the one copy's pod leads throughout
        assert record.epoch == 3  # epoch 1 recorded for the one copy, one per add
        stream = await kube.get("Stream", namespace, "orders") or {}
        assert stream["status"]["applied"]["replicas"] == 3
        assert condition(stream, "Ready")["reason"] == "StreamReady"
        assert condition(stream, "Available")["status"] == "True"
        assert condition(stream, "MembersChanging")["status"] == "False"
        await _every_message_on(cluster, namespace, record.members, MESSAGES)
        await publish(cluster.pods.pods[(namespace, "b", holder)], MESSAGES, MESSAGES)

        await kube.patch("Stream", namespace, "orders", {"spec": {"replicas": 1}})
        record = await settled(kube, namespace, lambda r: r.members == (holder,),
                               what="one member left")
        stream = await replication(kube, namespace, "orders", lambda r: r.leaving == (),
                                   timeout=CHANGE_S, what="the removed members' copies gone")
        for gone in {0, 1, 2} - {holder}:
            assert not await _holds(cluster, namespace, gone), f"pod {gone} holds a copy"
        assert record_of(stream).epoch == 5
        assert stream["status"]["applied"]["replicas"] == 1
        assert condition(stream, "Ready")["reason"] == "StreamReady"
        assert condition(stream, "UnderReplicated")["status"] == "False"
        await publish(cluster.pods.pods[(namespace, "b", holder)], MESSAGES, 2 * MESSAGES)
        await _every_message_on(cluster, namespace, (holder,), 3 * MESSAGES)
        await kube.delete("Stream", namespace, "orders")
        await delete_streams(kube, namespace)
    finally:
        stop_pods(cluster.pods.pods, launcher, namespace)



async def test_a_stream_shrunk_to_one_member_leaves_a_drained_pod_through_two(
        cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path) -> None:
    """A Stream of two copies shrunk to one is not copied off a drained pod: it holds the
    drain; replicas 2 puts a member on a pod not drained and the leadership moves to it,
    then replicas 1 removes the drained pod's member and the drain completes."""
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", 3)
    kubelet = Kubelet(kube, cluster.pods, launcher)
    try:
        await kube.create(broker_body(namespace, "b", replicas=3))
        await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
        await kubelet.sync(namespace, "b")
        await kube.create(stream_body(namespace, "orders", replicas=2))
        await settled(kube, namespace, lambda r: len(r.members) == 2, what="two members")
        await kube.patch("Stream", namespace, "orders", {"spec": {"replicas": 1}})
        record = await settled(kube, namespace, lambda r: len(r.members) == 1,
                               what="one member")
        drained = record.members[0]
        await publish(cluster.pods.pods[(namespace, "b", drained)], MESSAGES, 0)

        await kube.patch("Broker", namespace, "b",
                         {"metadata": {"annotations": {DRAIN: str(drained)}}})
        broker = await _drained(kube, namespace, lambda c: c.get("status") == "False"
                                and "no member in sync elsewhere" in c.get("message", ""))
        stream = await kube.get("Stream", namespace, "orders") or {}
        assert record_of(stream).members == (drained,)  # not copied off
        assert stream["status"]["leader"] == f"b-{drained}"

        await kube.patch("Stream", namespace, "orders", {"spec": {"replicas": 2}})
        record = await settled(kube, namespace, lambda r: len(r.members) == 2
                               and r.leader != drained, what="led from a pod not drained")
        await kube.patch("Stream", namespace, "orders", {"spec": {"replicas": 1}})
        record = await settled(kube, namespace, lambda r: len(r.members) == 1,
                               what="one member again")
        assert drained not in record.members
        broker = await _drained(kube, namespace, lambda c: c.get("status") == "True")
        assert "nothing leads or is placed on" in condition(broker, "Drained")["message"]
        await publish(cluster.pods.pods[(namespace, "b", record.members[0])], MESSAGES,
                      MESSAGES)
        await _every_message_on(cluster, namespace, record.members, 2 * MESSAGES)
        await kube.delete("Stream", namespace, "orders")
        await delete_streams(kube, namespace)
    finally:
        stop_pods(cluster.pods.pods, launcher, namespace)


async def _drained(kube: Kube, namespace: str, check: Callable[[dict[str, Any]], bool]
                   ) -> dict[str, Any]:
    """The Broker once its Drained condition passes ``check``."""
    async def look() -> Any:
        b = await kube.get("Broker", namespace, "b")
        return b if check(condition(b, "Drained")) else None
    found: dict[str, Any] = await eventually(look, timeout=CHANGE_S, what="the Drained condition")
    return found


async def test_a_scale_down_moves_a_one_member_stream_off_the_removed_pod(
        cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path) -> None:
    """A Stream shrunk to one member, on pod 2 (led from there, forced, before the shrink):
    scaling the Broker to two pods keeps pod 2 until the member is moved (added on a pod
    staying, then the one on pod 2 removed), never copied; then the scale-down applies."""
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", 3)
    kubelet = Kubelet(kube, cluster.pods, launcher)
    try:
        await kube.create(broker_body(namespace, "b", replicas=3))
        await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
        await kubelet.sync(namespace, "b")
        await kube.create(stream_body(namespace, "orders", replicas=3))
        await settled(kube, namespace, lambda r: len(r.members) == 3, what="three members")
        await kube.patch("Stream", namespace, "orders",
                         {"metadata": {"annotations": {FORCE_LEADER: "2"}}})
        await settled(kube, namespace, lambda r: r.leader == 2, what="led from pod 2")
        await kube.patch("Stream", namespace, "orders", {"spec": {"replicas": 1}})
        await settled(kube, namespace, lambda r: r.members == (2,), what="one member, pod 2")
        await publish(cluster.pods.pods[(namespace, "b", 2)], MESSAGES, 0)

        await kube.patch("Broker", namespace, "b", {"spec": {"replicas": 2}})

        async def applied() -> Any:
            await kubelet.sync(namespace, "b")  # the StatefulSet controller, as it changes
            sts = await kube.get("StatefulSet", namespace, "b") or {}
            return sts if int(sts["spec"]["replicas"]) == 2 else None

        await eventually(applied, timeout=CHANGE_S, what="the scale-down applied")
        stream = await kube.get("Stream", namespace, "orders") or {}
        assert 2 not in record_of(stream).members  # moved before the pod went
        record = await settled(kube, namespace, lambda r: 2 not in r.members,
                               what="the member off pod 2")
        assert len(record.members) == 1 and record.members[0] in (0, 1)
        stream = await kube.get("Stream", namespace, "orders") or {}
        assert "move" not in stream["status"] or not stream["status"]["move"]  # not copied
        assert stream["status"]["leader"] == f"b-{record.members[0]}"
        await publish(cluster.pods.pods[(namespace, "b", record.members[0])], MESSAGES,
                      MESSAGES)
        await _every_message_on(cluster, namespace, record.members, 2 * MESSAGES)
        await kube.delete("Stream", namespace, "orders")
        await delete_streams(kube, namespace)
    finally:
        stop_pods(cluster.pods.pods, launcher, namespace)
