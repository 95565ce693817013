"""Leader rebalancing and preferred leaders, end to end: replicated Streams on three real broker
processes, the real operator against the emulated API server.

Each stream records its preferred leader (the member placed to lead it). Three streams led by
one pod: the Broker's ``streamlet.dev/rebalance`` annotation spreads them, one each, by planned
transfers, is removed once done and says so in an Event; the new leaders become the preferred
ones. With ``restorePreferredLeader`` (the default), a leadership moved away comes back once
the preferred member has been in sync a while.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from streamlet_operator import driver
from streamlet_operator.failover import FORCE_LEADER, Replication
from streamlet_operator.kube import Kube
from streamlet_operator.placement import REBALANCE
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.peers import PeeredLauncher, delete_streams, stop_pods
from tests.operator.test_replicated import replication
from tests.operator.test_stream import stream_body

pytestmark = pytest.mark.process

PODS = 3
STREAMS = ("s1", "s2", "s3")
WAIT_S = 60


@pytest.fixture
async def peered(cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path
                 ) -> AsyncIterator[Kubelet]:
    """Three peered pods of Broker ``b`` (made by the test); stopped when the test ends."""
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", PODS)
    kubelet = Kubelet(kube, cluster.pods, launcher)
    try:
        yield kubelet
        await delete_streams(kube, namespace)
    finally:
        stop_pods(cluster.pods.pods, launcher, namespace)


async def _broker(kube: Kube, kubelet: Kubelet, namespace: str, **replication: Any) -> None:
    await kube.create({"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
                       "metadata": {"name": "b", "namespace": namespace},
                       "spec": {"replicas": PODS, "replication": replication}})
    await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
    await kubelet.sync(namespace, "b")


async def _streams(kube: Kube, namespace: str, names: tuple[str, ...]) -> dict[str, int]:
    """``names`` created with three members each and Ready, all in sync; their leaders."""
    for name in names:
        await kube.create(stream_body(namespace, name, replicas=3))
    leaders = {}
    for name in names:
        stream = await replication(kube, namespace, name,
                                   lambda r: r.phase == "Ready" and len(r.in_sync) == 3,
                                   timeout=WAIT_S)
        leader = _record(stream).leader
        assert leader is not None
        leaders[name] = leader
    return leaders


def _record(stream: dict[str, Any]) -> Replication:
    record = Replication.from_status(stream["status"])
    assert record is not None
    return record


async def _preferred(kube: Kube, namespace: str, name: str) -> int | None:
    stream = await kube.get("Stream", namespace, name) or {}
    value = ((stream.get("status") or {}).get("replication") or {}).get("preferredLeader")
    return None if value is None else int(value)


async def _recorded(kube: Kube, namespace: str, name: str) -> int:
    """The preferred leader once recorded (``eventually`` takes 0 for not yet: wrapped)."""
    async def look() -> list[int] | None:
        value = await _preferred(kube, namespace, name)
        return None if value is None else [value]
    [value] = await eventually(look, what=f"{name}'s preferred leader")
    return int(value)


async def _force(kube: Kube, namespace: str, name: str, pod: int) -> None:
    await kube.patch("Stream", namespace, name,
                     {"metadata": {"annotations": {FORCE_LEADER: str(pod)}}})
    await replication(kube, namespace, name,
                      lambda r: r.leader == pod and r.phase == "Ready" and len(r.in_sync) == 3,
                      timeout=WAIT_S, what=f"{name} led by pod {pod}")


async def test_the_rebalance_annotation_spreads_the_leaders(
        kube: Kube, namespace: str, peered: Kubelet) -> None:
    await _broker(kube, peered, namespace, restorePreferredLeader=False)
    leaders = await _streams(kube, namespace, STREAMS)
    for name, leader in leaders.items():  # the Create's pod: recorded as preferred
        assert await _recorded(kube, namespace, name) == leader
    for name, leader in leaders.items():
        if leader != 0:
            await _force(kube, namespace, name, 0)
    # restorePreferredLeader false: nothing moves them back
    for name in STREAMS:
        assert _record(await kube.get("Stream", namespace, name) or {}).leader == 0

    await kube.patch("Broker", namespace, "b", {"metadata": {"annotations": {REBALANCE: "1"}}})

    async def spread() -> dict[str, int] | None:
        now = {}
        for name in STREAMS:
            record = _record(await kube.get("Stream", namespace, name) or {})
            if record.leader is None or record.phase != "Ready":
                return None
            now[name] = record.leader
        return now if sorted(now.values()) == [0, 1, 2] else None

    spread_leaders = await eventually(spread, timeout=WAIT_S, what="one leader per pod")

    async def done() -> list[dict[str, Any]] | None:
        broker = await kube.get("Broker", namespace, "b") or {}
        if REBALANCE in (broker["metadata"].get("annotations") or {}):
            return None
        return [e for e in await kube.list("Event", namespace)
                if e.get("reason") == "Rebalanced"] or None

    [event] = await eventually(done, timeout=WAIT_S, what="the annotation removed, an Event")
    assert event["type"] == "Normal" and "2 leaderships moved" in event["message"]
    # the leaders the rebalance chose are the preferred ones now
    for name, leader in spread_leaders.items():
        assert await _preferred(kube, namespace, name) == leader


async def test_the_preferred_leader_comes_back(kube: Kube, namespace: str, peered: Kubelet,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced away, the leadership comes back once the preferred member has been in sync for
    RESTORE_SETTLE_S (shortened here; the operator runs in this process)."""
    monkeypatch.setattr(driver, "RESTORE_SETTLE_S", 2.0)
    await _broker(kube, peered, namespace)
    [leader] = (await _streams(kube, namespace, ("s1",))).values()
    assert await _recorded(kube, namespace, "s1") == leader
    epoch = _record(await kube.get("Stream", namespace, "s1") or {}).epoch
    other = (leader + 1) % PODS
    await kube.patch("Stream", namespace, "s1",
                     {"metadata": {"annotations": {FORCE_LEADER: str(other)}}})
    # forced away, then moved back by a planned transfer once in sync
    stream = await replication(kube, namespace, "s1",
                               lambda r: r.leader == leader and r.epoch >= epoch + 2,
                               timeout=WAIT_S, what="the preferred leader back")
    assert _record(stream).epoch >= epoch + 2
    assert await _preferred(kube, namespace, "s1") == leader
