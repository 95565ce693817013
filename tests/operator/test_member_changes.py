"""Member set changes on Kubernetes, end to end: real broker pods (peered), the real operator
against the emulated API server.

A member whose pod is gone for good is replaced after the Broker's replaceAfter (a new member
added and caught up, then the lost one removed); ``spec.replicas`` edited up and down adds and
removes members one at a time; a scale-down moves members off the pods it removes, then
applies. Every message confirmed before is on the new member set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from streamlet_operator.failover import PARTITIONS_FIELD, Replication
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually, read_all
from tests.operator.kubelet import Kubelet
from tests.operator.peers import PeeredLauncher, delete_streams, stop_pods
from tests.operator.test_broker import broker_body, condition
from tests.operator.test_replicated import publish, record_of, replication
from tests.operator.test_stream import stream_body

pytestmark = pytest.mark.process

MESSAGES = 100
#: Each change is a learner made, caught up and joined, a few driver ticks apart.
CHANGE_S = 45


@pytest.fixture
async def four_pods(cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path
                    ) -> AsyncIterator[tuple[Kubelet, PeeredLauncher]]:
    """Broker ``b`` of four peered pods replacing lost members after 2 s, and Stream
    ``orders`` with replicas 3 Ready, MESSAGES confirmed on it; the pods stop at the end."""
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", 4)
    kubelet = Kubelet(kube, cluster.pods, launcher)
    try:
        await kube.create(broker_body(namespace, "b", replicas=4,
                                      replication={"replaceAfter": "2s"}))
        await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
        await kubelet.sync(namespace, "b")
        await kube.create(stream_body(namespace, "orders", replicas=3))
        stream = await replication(kube, namespace, "orders",
                                   lambda r: r.phase == "Ready" and len(r.in_sync) == 3)
        record = record_of(stream)
        assert record.leader is not None
        await publish(cluster.pods.pods[(namespace, "b", record.leader)], MESSAGES, 0)
        yield kubelet, launcher
        await delete_streams(kube, namespace)
    finally:
        stop_pods(cluster.pods.pods, launcher, namespace)


async def settled(kube: Kube, namespace: str, check: Callable[[Replication], bool],
                  what: str) -> Replication:
    """The record once no change is in progress, every member in sync and ``check`` holds."""
    stream = await replication(
        kube, namespace, "orders", lambda r: r.changing is None and r.phase == "Ready"
        and set(r.in_sync) == set(r.members) and check(r), timeout=CHANGE_S, what=what)
    return record_of(stream)


async def every_message_on(cluster: Cluster, namespace: str, members: tuple[int, ...]) -> None:
    expected = [f"m{i}".encode() for i in range(MESSAGES)]
    for m in members:
        assert await read_all(cluster.pods.pods[(namespace, "b", m)], "orders",
                              MESSAGES) == expected, f"member {m}"


async def reasons(kube: Kube, namespace: str, wanted: Callable[[list[str]], bool]
                  ) -> list[str]:
    """The Events' reasons once ``wanted`` holds of them (posted after the record is written)."""
    async def look() -> list[str] | None:
        got = [str(e.get("reason")) for e in await kube.list("Event", namespace)]
        return got if wanted(got) else None

    result: list[str] = await eventually(look, what="the Events")
    return result


async def test_a_member_lost_for_good_is_replaced(
        cluster: Cluster, kube: Kube, namespace: str,
        four_pods: tuple[Kubelet, PeeredLauncher]) -> None:
    _, launcher = four_pods
    before = record_of(await kube.get("Stream", namespace, "orders") or {})
    lost = max(m for m in before.members if m != before.leader)
    spare = ({0, 1, 2, 3} - set(before.members)).pop()
    launcher.kill(cluster.pods.pods.pop((namespace, "b", lost)))  # never back

    record = await settled(kube, namespace, lambda r: lost not in r.members,
                           what=f"member {lost} replaced")
    assert set(record.members) == set(before.members) - {lost} | {spare}
    assert record.epoch >= before.epoch + 2  # an epoch for the add, one for the remove
    assert record.leaving == (lost,)  # its pod never answered: told again if it comes back
    stream = await kube.get("Stream", namespace, "orders")
    assert condition(stream, "MembersChanging")["status"] == "False"
    await reasons(kube, namespace,
                  lambda got: {"MemberAdded", "MemberRemoved", "MemberReplaced"} <= set(got))
    await every_message_on(cluster, namespace, record.members)


async def test_replicas_edited_up_and_down(
        cluster: Cluster, kube: Kube, namespace: str,
        four_pods: tuple[Kubelet, PeeredLauncher]) -> None:
    before = record_of(await kube.get("Stream", namespace, "orders") or {})
    await kube.patch("Stream", namespace, "orders", {"spec": {"replicas": 4}})
    record = await settled(kube, namespace, lambda r: r.members == (0, 1, 2, 3),
                           what="a fourth member")
    stream = await kube.get("Stream", namespace, "orders") or {}
    assert stream["status"]["applied"]["replicas"] == 4
    assert condition(stream, "Ready")["reason"] == "StreamReady"
    await every_message_on(cluster, namespace, record.members)

    await kube.patch("Stream", namespace, "orders", {"spec": {"replicas": 2}})
    record = await settled(kube, namespace, lambda r: len(r.members) == 2,
                           what="two members left")
    assert record.leader == before.leader  # the leader is kept: followers go
    await replication(kube, namespace, "orders", lambda r: r.leaving == (), timeout=CHANGE_S,
                      what="the removed members dropped their copies")
    for gone in {0, 1, 2, 3} - set(record.members):
        assert not await _holds(cluster, namespace, gone)
    await reasons(kube, namespace, lambda got: got.count("MemberAdded") == 1
                  and got.count("MemberRemoved") == 2)
    await every_message_on(cluster, namespace, record.members)


async def _holds(cluster: Cluster, namespace: str, ordinal: int) -> bool:
    from tests.operator.kubelet import ClientProbe
    return await ClientProbe().exists(cluster.pods.pods[(namespace, "b", ordinal)], "orders")


async def test_a_scale_down_moves_members_off_the_removed_pod(
        cluster: Cluster, kube: Kube, namespace: str,
        four_pods: tuple[Kubelet, PeeredLauncher]) -> None:
    """A member is put on pod 3 first (a lost follower replaced there; its pod then comes
    back with its old copy, which it is told to drop); scaling to three pods moves that
    member back onto it before pod 3 goes."""
    kubelet, launcher = four_pods
    before = record_of(await kube.get("Stream", namespace, "orders") or {})
    away = max(m for m in before.members if m != before.leader)
    assert 3 not in before.members, before  # placed on the first pods
    launcher.kill(cluster.pods.pods.pop((namespace, "b", away)))
    await settled(kube, namespace, lambda r: 3 in r.members, what="a member on pod 3")
    kubelet.restart(namespace, "b", away)
    await replication(kube, namespace, "orders", lambda r: r.leaving == (), timeout=CHANGE_S,
                      what=f"pod {away} dropped its old copy")

    await kube.patch("Broker", namespace, "b", {"spec": {"replicas": 3}})

    async def applied() -> Any:
        await kubelet.sync(namespace, "b")  # the StatefulSet controller, as it changes
        sts = await kube.get("StatefulSet", namespace, "b") or {}
        return sts if int(sts["spec"]["replicas"]) == 3 else None

    await eventually(applied, timeout=CHANGE_S, what="the scale-down applied")
    record = await settled(kube, namespace, lambda r: 3 not in r.members,
                           what="members off pod 3")
    assert record.members == (0, 1, 2)
    await reasons(kube, namespace, lambda got: got.count("MemberReplaced") == 2)

    async def unblocked() -> bool:  # the status follows the StatefulSet's patch, not with it
        broker = await kube.get("Broker", namespace, "b") or {}
        return condition(broker, "ScaleDownBlocked").get("status") == "False"

    await eventually(unblocked, timeout=CHANGE_S, what="ScaleDownBlocked False")
    await every_message_on(cluster, namespace, record.members)


async def test_a_super_stream_s_partitions_change_replicas(
        cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path) -> None:
    """partitions 2 with replicas 2 on three pods, then replicas 3: each partition gets a
    third member, its own change; then 2 again: each loses one."""
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", 3)
    kubelet = Kubelet(kube, cluster.pods, launcher)
    parts = ["events-0", "events-1"]

    async def partitions(check: Callable[[Replication], bool], what: str) -> dict[str, Any]:
        async def look() -> Any:
            s = await kube.get("Stream", namespace, "events")
            got = {p: Replication.from_status({"replication": doc}) for p, doc in (
                ((s or {}).get("status") or {}).get(PARTITIONS_FIELD) or {}).items()}
            return s if set(got) == set(parts) and all(
                r is not None and r.changing is None and r.phase == "Ready"
                and set(r.in_sync) == set(r.members) and check(r)
                for r in got.values()) else None
        result: dict[str, Any] = await eventually(look, timeout=CHANGE_S, what=what)
        return result

    try:
        await kube.create(broker_body(namespace, "b", replicas=3))
        await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
        await kubelet.sync(namespace, "b")
        await kube.create(stream_body(namespace, "events", partitions=2, replicas=2))
        await partitions(lambda r: len(r.members) == 2, "two members per partition")
        await kube.patch("Stream", namespace, "events", {"spec": {"replicas": 3}})
        await partitions(lambda r: r.members == (0, 1, 2), "three members per partition")
        await kube.patch("Stream", namespace, "events", {"spec": {"replicas": 2}})
        stream = await partitions(lambda r: len(r.members) == 2, "two members again")
        assert condition(stream, "MembersChanging")["status"] == "False"
        await reasons(kube, namespace, lambda got: got.count("MemberAdded") == 2
                      and got.count("MemberRemoved") == 2)
        await kube.delete("Stream", namespace, "events")
        await delete_streams(kube, namespace)
    finally:
        stop_pods(cluster.pods.pods, launcher, namespace)
