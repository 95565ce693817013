"""The operator's roll and scale-down of a Broker with a replicated Stream, end to end: three
real broker processes as pods that know their peers, the real operator against the emulated
API server, and the test as the StatefulSet controller (tests/operator/statefulset.py).

A configuration change rolls the pods one at a time while a named producer publishes, resending
what was not confirmed with its ids: leadership leaves each pod before it is deleted, never two
pods down, publishes confirmed again after each step, every confirmed message once and in
order afterwards. A member out of sync holds the roll (the Broker's Rolling condition says
why) until it is back; a pod that never gets Ready (a bad image) holds it until a fix rolls
that pod forward. A scale-down that would remove a member is held, not applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.client.errors import StreamletError
from streamlet_operator.builders.statefulset import TEMPLATE_HASH
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.peers import PeeredLauncher
from tests.operator.statefulset import StatefulSetController
from tests.operator.test_broker import condition
from tests.operator.test_replicated import record_of, replication
from tests.operator.test_replicated import replicated_stream as replicated_stream  # noqa: F401

pytestmark = pytest.mark.process

STEP = 300  # confirms before the roll, and more after each pod
ROLL_S = 240  # three pods, each: transfer, stop, start, catch up; on two loaded cores
HELD_S = 5  # how long a held roll or scale-down is watched doing nothing


class Producer:
    """A named producer on the Stream's leader (from its status), resending what was not
    confirmed with the same ids after each switch (deduplicated by the new leader)."""

    def __init__(self, cluster: Cluster, kube: Kube, namespace: str) -> None:
        self.cluster, self.kube, self.namespace = cluster, kube, namespace
        self.confirmed: set[int] = set()
        self.sent = 0
        self.done = asyncio.Event()

    async def _leader(self) -> tuple[str, int] | None:
        obj = await self.kube.get("Stream", self.namespace, "orders")
        leader = record_of(obj or {}).leader if obj else None
        return None if leader is None else self.cluster.pods.pods.get(
            (self.namespace, "b", leader))

    async def run(self) -> None:
        while True:
            address = await self._leader()
            if address is None:
                await asyncio.sleep(0.1)
                continue
            try:
                async with await connect(*address, timeout=5) as client:
                    producer = await client.producer("orders", reference="app",
                                                     max_unconfirmed=100)
                    on_confirm = producer._on_confirm

                    def record(ids: tuple[int, ...], on_confirm: Any = on_confirm) -> None:
                        self.confirmed.update(ids)
                        on_confirm(ids)

                    producer._on_confirm = record  # type: ignore[method-assign]
                    for i in range(1, self.sent + 1):
                        if i not in self.confirmed:
                            await producer.send(b"%d" % i, publishing_id=i)
                    while not self.done.is_set():
                        self.sent += 1
                        await producer.send(b"%d" % self.sent, publishing_id=self.sent)
                        if self.sent % 20 == 0:
                            await asyncio.sleep(0.01)  # paced: two cores shared
                    await asyncio.wait_for(producer.flush(), 10)
                    if len(self.confirmed) >= self.sent:
                        return
            except (StreamletError, OSError, TimeoutError):
                await asyncio.sleep(0.1)  # sealed, fenced or stopped: look the leader up again

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Producer]:
        task = asyncio.create_task(self.run())
        try:
            yield self
            self.done.set()
            await asyncio.wait_for(task, 60)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def at_least(self, n: int, what: str) -> None:
        async def enough() -> bool:
            return len(self.confirmed) >= n
        await eventually(enough, timeout=ROLL_S, what=what)


async def _pods_up(kube: Kube, namespace: str, revision: str | None = None) -> bool:
    pods = await kube.list("Pod", namespace)
    return len(pods) == 3 and all(
        not p["metadata"].get("deletionTimestamp") and (revision is None or (
            p["metadata"].get("annotations") or {}).get(TEMPLATE_HASH) == revision)
        for p in pods)


async def _revision(kube: Kube, namespace: str, not_: str | None = None) -> str | None:
    sts = await kube.get("StatefulSet", namespace, "b") or {}
    template = (sts.get("spec") or {}).get("template") or {}
    value: str | None = (template.get("metadata") or {}).get("annotations", {}).get(TEMPLATE_HASH)
    return value if value != not_ else None


async def _rolling(kube: Kube, namespace: str, status: str, reason: str) -> dict[str, Any]:
    async def look() -> Any:
        b = await kube.get("Broker", namespace, "b")
        c = condition(b, "Rolling")
        return b if (c.get("status"), c.get("reason")) == (status, reason) else None
    found: dict[str, Any] = await eventually(look, timeout=ROLL_S,
                                             what=f"Rolling={status} {reason}")
    return found


async def _change_template(kube: Kube, namespace: str) -> str:
    """A configuration change (the retention): a new pod template; its hash."""
    before = await _revision(kube, namespace)
    await kube.patch("Broker", namespace, "b", {"spec": {"retention": {"maxAge": "2D"}}})
    changed: str = await eventually(lambda: _revision(kube, namespace, not_=before),
                                    what="the StatefulSet's new template")
    return changed


async def test_a_roll_moves_leadership_first_and_loses_no_confirmed_message(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:  # noqa: F811
    _, launcher, _ = replicated_stream
    producer = Producer(cluster, kube, namespace)

    async def at_deletion(ordinal: int) -> tuple[int | None, int, tuple[int, ...]]:
        """When a pod's deletion is seen: the stream's leader, how many were confirmed, and
        the members in sync (the operator's last look)."""
        record = record_of(await kube.get("Stream", namespace, "orders") or {})
        return record.leader, len(producer.confirmed), record.in_sync

    controller = StatefulSetController(kube, cluster.pods, launcher, namespace, "b",
                                       on_delete=at_deletion)
    async with controller.running(), producer.running():
        await eventually(lambda: _pods_up(kube, namespace), what="the Pod objects")
        await producer.at_least(STEP, "confirms before the roll")
        epoch = record_of(await kube.get("Stream", namespace, "orders") or {}).epoch
        revision = await _change_template(kube, namespace)
        await _rolling(kube, namespace, "False", "UpToDate")
        assert await _pods_up(kube, namespace, revision)
        assert len(controller.deletions) == 3, controller.deletions
        # publishes confirmed again after the last step
        await producer.at_least(controller.deletions[-1].seen[1] + STEP, "confirms after")

    assert sorted(d.ordinal for d in controller.deletions) == [0, 1, 2]
    assert controller.max_down == 1, "never two pods down at once"
    for d in controller.deletions:
        leader, _, in_sync = d.seen
        assert leader is not None and leader != d.ordinal, f"pod {d.ordinal} went leading"
        # the pod rolled before it back in sync: a quorum left in sync without this one
        assert set(in_sync) == {0, 1, 2}, f"pod {d.ordinal} went with in sync {in_sync}"
    counts = [d.seen[1] for d in controller.deletions]
    assert counts == sorted(counts) and len(set(counts)) == 3, (
        f"confirms between the steps: {counts}")

    n = producer.sent
    assert producer.confirmed == set(range(1, n + 1)) and n >= 2 * STEP
    stream = await replication(kube, namespace, "orders",
                               lambda r: r.phase == "Ready" and len(r.in_sync) == 3)
    record = record_of(stream)
    assert record.epoch > epoch and record.reason == "Transferred", record
    assert record.leader is not None
    async with await connect(*cluster.pods.pods[(namespace, "b", record.leader)]) as client:
        consumer = await client.consumer("orders", "first", credit=100)
        bodies = [int((await asyncio.wait_for(consumer.__anext__(), 30)).body)
                  for _ in range(n)]
    assert bodies == list(range(1, n + 1)), "every confirmed message once, in order"
    events = [e["message"] for e in await kube.list("Event", namespace)
              if e.get("reason") == "LeaderElected"]
    assert any("(Transferred)" in m for m in events), events


async def test_a_roll_waits_for_a_member_out_of_sync_and_resumes(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:  # noqa: F811
    _, launcher, stream = replicated_stream
    controller = StatefulSetController(kube, cluster.pods, launcher, namespace, "b")
    async with controller.running():
        await eventually(lambda: _pods_up(kube, namespace), what="the Pod objects")
        record = record_of(stream)
        lagging = min(m for m in record.members if m != record.leader)
        address = cluster.pods.pods[(namespace, "b", lagging)]
        launcher.pause(address)  # SIGSTOP: it runs, its Pod says Ready, it answers nothing
        try:
            await replication(kube, namespace, "orders", lambda r: lagging not in r.in_sync,
                              what="the stopped member out of sync")
            await _change_template(kube, namespace)
            broker = await _rolling(kube, namespace, "True", "WaitingForPod")
            assert f"pod {lagging}" in condition(broker, "Rolling")["message"]
            deadline = time.monotonic() + HELD_S
            while time.monotonic() < deadline:  # held: nothing deleted while it is out
                assert not controller.deletions, controller.deletions
                assert condition(await kube.get("Broker", namespace, "b"),
                                 "Rolling")["status"] == "True"
                await asyncio.sleep(0.2)
        finally:
            launcher.pause(address, paused=False)
        await _rolling(kube, namespace, "False", "UpToDate")
    assert sorted(d.ordinal for d in controller.deletions) == [0, 1, 2]
    assert controller.max_down == 1


async def test_a_bad_image_holds_the_roll_until_a_fix_rolls_that_pod_forward(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:  # noqa: F811
    """The first pod rolled to an image that cannot be pulled never gets Ready: no other pod
    is taken; the fixed image rolls that pod forward at once (not Ready past the timeout),
    then the others one at a time, and the stream is back in sync on all three."""
    bad, good = "registry.invalid/streamlet:broken", "registry.invalid/streamlet:fixed"
    _, launcher, _ = replicated_stream
    controller = StatefulSetController(kube, cluster.pods, launcher, namespace, "b",
                                       bad_images=frozenset({bad}))
    async with controller.running():
        await eventually(lambda: _pods_up(kube, namespace), what="the Pod objects")
        before = await _revision(kube, namespace)
        await kube.patch("Broker", namespace, "b", {"spec": {
            "image": bad, "rollout": {"notReadyTimeout": "2s"}}})
        broken = await eventually(lambda: _revision(kube, namespace, not_=before),
                                  what="the bad image's template")
        broker = await _rolling(kube, namespace, "True", "NewPodNotReady")
        first = controller.deletions[0].ordinal
        assert f"pod {first} runs the current pod template" in condition(
            broker, "Rolling")["message"]
        deadline = time.monotonic() + HELD_S
        while time.monotonic() < deadline:  # held: no Ready pod taken while it is not Ready
            assert len(controller.deletions) == 1, controller.deletions
            await asyncio.sleep(0.2)
        await kube.patch("Broker", namespace, "b", {"spec": {"image": good}})
        fixed = await eventually(lambda: _revision(kube, namespace, not_=broken),
                                 what="the fixed image's template")
        await _rolling(kube, namespace, "False", "UpToDate")
        assert await _pods_up(kube, namespace, fixed)
    ordinals = [d.ordinal for d in controller.deletions]
    assert ordinals[:2] == [first, first], ordinals
    assert controller.deletions[1].revision == broken
    assert sorted(ordinals[2:]) == sorted({0, 1, 2} - {first}), ordinals
    assert controller.max_down == 1
    events = [e for e in await kube.list("Event", namespace)
              if e.get("reason") == "PodRolledForward"]
    assert len(events) == 1 and f"rolling pod {first} forward" in events[0]["message"], events
    await replication(kube, namespace, "orders",
                      lambda r: r.phase == "Ready" and len(r.in_sync) == 3,
                      what="every member back in sync")


async def test_a_scale_down_that_would_remove_a_member_is_held(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:  # noqa: F811
    """No pod can take a member: scaling three pods to two, MoveStreams or not,
    keeps the third while the replicated Stream has a member there, and says so."""
    await kube.patch("Broker", namespace, "b",
                     {"spec": {"replicas": 2, "scaleDownPolicy": "MoveStreams"}})

    async def held() -> Any:
        b = await kube.get("Broker", namespace, "b")
        c = condition(b, "ScaleDownBlocked")
        return b if (c.get("status"), c.get("reason")) == ("True", "ReplicatedMembers") else None

    broker = await eventually(held, what="ScaleDownBlocked ReplicatedMembers")
    assert "orders (pod 2)" in condition(broker, "ScaleDownBlocked")["message"]
    assert broker["status"]["phase"] == "ScaleDownBlocked"
    deadline = time.monotonic() + HELD_S
    while time.monotonic() < deadline:  # not applied, and the stream is not moved
        sts = await kube.get("StatefulSet", namespace, "b") or {}
        assert sts["spec"]["replicas"] == 3
        obj = await kube.get("Stream", namespace, "orders") or {}
        assert not (obj.get("status") or {}).get("move"), obj["status"]
        await asyncio.sleep(0.2)
    record = record_of(await kube.get("Stream", namespace, "orders") or {})
    assert record.members == (0, 1, 2) and record.phase == "Ready"

    await kube.delete("Stream", namespace, "orders")  # the members gone: the pod may go

    async def applied() -> bool:
        sts = await kube.get("StatefulSet", namespace, "b") or {}
        return int(sts["spec"]["replicas"]) == 2
    await eventually(applied, timeout=60, what="the scale-down applied")
