"""The operator as placement driver, end to end: a replicated Stream on three real broker
processes (pods that know their peers), the real operator against the emulated API server.

Its status records the members, epoch and leader; a leader pod killed (kill -9) is replaced,
the status, the directory and the pods following, and a client publishes again with every
message confirmed before the kill still there; two drivers racing for one epoch leave it to
one (the resourceVersion compare-and-swap); with no majority left, nothing is elected until
the force-leader annotation asks, and then the unclean election says so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from streamlet.client import connect
from streamlet.driver.elector import Members
from streamlet_operator import names
from streamlet_operator.brokers import Address, ClientBrokerAdmin
from streamlet_operator.driver import Driver
from streamlet_operator.failover import FORCE_LEADER, Replication
from streamlet_operator.kube import Kube
from streamlet_operator.model import BrokerModel
from streamlet_operator.runtime import Runtime
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually, kube_client, read_all
from tests.operator.kubelet import Kubelet
from tests.operator.peers import PeeredLauncher, delete_streams, stop_pods
from tests.operator.test_broker import condition
from tests.operator.test_stream import running_broker, stream_body

pytestmark = pytest.mark.process

PODS = 3
MESSAGES = 200
LAGGING, LAGGING_SIZE = 2000, 16 * 1024
# Detection takes 3 probes a second apart, then an election: well inside this under load.
FAILOVER_S = 60


@pytest.fixture
async def replicated_stream(cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path
                            ) -> AsyncIterator[tuple[Kubelet, PeeredLauncher, dict[str, Any]]]:
    """Broker ``b`` of three peered pods and Stream ``orders`` with replicas 3, Ready with its
    members recorded; the pods stop when the test ends."""
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", PODS)
    kubelet = Kubelet(kube, cluster.pods, launcher)
    try:
        await running_broker(kube, kubelet, namespace, replicas=PODS)
        await kube.create(stream_body(namespace, "orders", replicas=3))
        stream = await replication(kube, namespace, "orders",
                                   lambda r: r.phase == "Ready" and len(r.in_sync) == 3)
        yield kubelet, launcher, stream
        # Deleted while the pods run: its finalizer deletes it on the brokers.
        await delete_streams(kube, namespace)
    finally:
        stop_pods(cluster.pods.pods, launcher, namespace)


async def replication(kube: Kube, namespace: str, name: str, check: Any,
                      timeout: float = FAILOVER_S, what: str = "") -> dict[str, Any]:
    """The Stream once its status.replication passes ``check``."""
    async def look() -> Any:
        s = await kube.get("Stream", namespace, name)
        record = Replication.from_status((s or {}).get("status"))
        return s if record is not None and check(record) else None

    result: dict[str, Any] = await eventually(look, timeout=timeout,
                                              what=what or f"{name}'s replication status")
    return result


def record_of(stream: dict[str, Any]) -> Replication:
    record = Replication.from_status(stream["status"])
    assert record is not None
    return record


def body(i: int, size: int = 0) -> bytes:
    return f"m{i}".encode().ljust(size, b".")


async def publish(address: Address, count: int, start: int, size: int = 0) -> None:
    """``count`` messages (of ``size`` bytes at least), every one confirmed."""
    client = await connect(*address)
    try:
        producer = await client.producer("orders")
        await producer.send_many([body(i, size) for i in range(start, start + count)])
        await producer.flush()
        await producer.close()
    finally:
        await client.close()


async def test_status_records_members_and_a_killed_leader_is_replaced(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:
    kubelet, launcher, stream = replicated_stream
    record = record_of(stream)
    assert (record.epoch, record.members) == (1, (0, 1, 2))
    assert record.leader is not None and stream["status"]["leader"] == f"b-{record.leader}"
    assert condition(stream, "Available")["status"] == "True"
    assert condition(stream, "UnderReplicated")["status"] == "False"
    old = record.leader
    await publish(cluster.pods.pods[(namespace, "b", old)], MESSAGES, 0)
    elections = _elections(namespace)

    launcher.kill(cluster.pods.pods.pop((namespace, "b", old)))  # kill -9 of the leader's pod
    stream = await replication(kube, namespace, "orders",
                               lambda r: r.epoch >= 2 and r.leader not in (None, old)
                               and r.phase == "Ready", what="a new leader, Ready")
    record = record_of(stream)
    new = record.leader
    assert new is not None
    assert stream["status"]["leader"] == f"b-{new}"
    assert [p["ordinal"] for p in stream["status"]["placement"]] == [new]
    assert set(record.in_sync) == {0, 1, 2} - {old}
    assert condition(stream, "UnderReplicated")["status"] == "True"

    async def directory() -> Any:
        cm = await kube.get("ConfigMap", namespace, names.directory_configmap("b")) or {}
        entry = json.loads(cm["data"][names.DIRECTORY_KEY])["streams"].get("orders")
        return entry if isinstance(entry, dict) and entry["epoch"] == record.epoch else None

    entry = await eventually(directory, what="the directory names the new leader")
    host, port = cluster.pods.pods[(namespace, "b", new)]
    assert entry["leader"] == f"{host}:{port}"

    await publish((host, port), MESSAGES, MESSAGES)  # confirmed: a majority holds them
    assert await read_all((host, port), "orders", 2 * MESSAGES) == [
        f"m{i}".encode() for i in range(2 * MESSAGES)]
    events = [e for e in await kube.list("Event", namespace) if e.get("reason") == "LeaderElected"]
    assert events and f"b-{new} leads epoch {record.epoch}" in events[-1]["message"]
    assert _elections(namespace) > elections, "streamlet_operator_elections_total counts it"

    # The old leader's pod comes back (same volume): it follows in the current epoch.
    kubelet.restart(namespace, "b", old)
    await replication(kube, namespace, "orders",
                      lambda r: r.epoch == record.epoch and r.leader == new
                      and set(r.in_sync) == {0, 1, 2}, what="the restarted pod in sync")
    assert await read_all(cluster.pods.pods[(namespace, "b", old)], "orders", 2 * MESSAGES) == [
        f"m{i}".encode() for i in range(2 * MESSAGES)]


def _elections(namespace: str) -> float:
    """streamlet_operator_elections_total of Broker ``b`` in ``namespace``, every reason."""
    return sum(s.value for metric in REGISTRY.collect()
               if metric.name == "streamlet_operator_elections" for s in metric.samples
               if s.name.endswith("_total") and s.labels.get("namespace") == namespace
               and s.labels.get("broker") == "b")


async def _guest(namespace: str, broker: str) -> tuple[str, str]:
    return "guest", "guest"


async def test_two_drivers_racing_never_use_an_epoch_twice(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:
    """Two placement drivers (two operator instances) elect the same stream from the same
    status at once, three times: each time one reserves the epoch and elects; the other's
    compare-and-swap finds the epoch taken and it fences nothing. The test cluster's own
    operator is a third driver: a round it also elected in (the epoch moved by more than
    one, or neither of the two won) still may not have two winners, and is run again."""
    _, _, stream = replicated_stream
    runtimes = [Runtime(kube=kube_client(cluster.url), admin=ClientBrokerAdmin(),
                        resolve=cluster.pods, credentials=_guest) for _ in range(2)]
    try:
        broker = BrokerModel.from_body(await kube.get("Broker", namespace, "b") or {})
        drivers = [Driver(r, namespace, "b") for r in runtimes]
        won: list[int] = []
        for _ in range(12):
            obj = await kube.get("Stream", namespace, "orders")
            assert obj is not None
            record = record_of(obj)
            members = [await d._members(broker) for d in drivers]
            results = await asyncio.gather(*(
                d.elect(broker, m, obj, record, {0, 1, 2})
                for d, m in zip(drivers, members, strict=True)))
            assert results.count(True) <= 1, results  # never two winners of one epoch
            after = record_of(await kube.get("Stream", namespace, "orders") or {})
            if True not in results or after.epoch != record.epoch + 1:
                continue  # the cluster's operator elected too: this round proves less
            assert after.leader is not None
            won.append(after.epoch)
            if len(won) == 3:
                break
        assert len(won) == 3, f"only {len(won)} of 12 rounds were the two drivers' alone"
        assert won == sorted(set(won)), won
    finally:
        for r in runtimes:
            await r.kube.close()
            await r.admin.close()  # type: ignore[attr-defined]


async def test_force_leader_without_a_majority_is_an_unclean_election(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:
    _, launcher, stream = replicated_stream
    record = record_of(stream)
    assert record.leader is not None
    survivor = next(m for m in record.members if m != record.leader)
    for ordinal in record.members:
        if ordinal != survivor:
            launcher.kill(cluster.pods.pods.pop((namespace, "b", ordinal)))
    stream = await replication(kube, namespace, "orders",
                               lambda r: r.leader is None and r.phase == "Unavailable",
                               what="no leader without a majority")
    assert condition(stream, "Available")["status"] == "False"
    assert condition(stream, "Electing")["status"] == "True"
    epoch = record_of(stream).epoch

    await kube.patch("Stream", namespace, "orders",
                     {"metadata": {"annotations": {FORCE_LEADER: str(survivor)}}})
    stream = await replication(kube, namespace, "orders", lambda r: r.leader == survivor,
                               what="the forced leader")
    record = record_of(stream)
    assert record.reason == "UncleanElection" and record.epoch == epoch + 1
    assert condition(stream, "UncleanElection")["status"] == "True"

    async def warned() -> Any:
        return [e for e in await kube.list("Event", namespace)
                if e.get("reason") == "UncleanElection" and e.get("type") == "Warning"]

    assert await eventually(warned, what="a Warning Event")

    async def unannotated() -> Any:
        s = await kube.get("Stream", namespace, "orders")
        return s if FORCE_LEADER not in ((s or {})["metadata"].get("annotations") or {}) else None

    await eventually(unannotated, what="the annotation removed")


async def test_a_lagging_member_is_never_elected(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:
    """One follower stopped (SIGSTOP) while messages are confirmed by the other two, then the
    leader killed: no leader while only one member answers; the stopped one running again
    makes a majority, and the member holding every confirmed message leads, not it."""
    _, launcher, stream = replicated_stream
    record = record_of(stream)
    leader = record.leader
    assert leader is not None
    lagging, current = (m for m in record.members if m != leader)
    launcher.pause(cluster.pods.pods[(namespace, "b", lagging)])
    # 32 MB: more than the socket buffers between the leader and the stopped member hold (it
    # would catch up from them when it runs again, and then not lag).
    await publish(cluster.pods.pods[(namespace, "b", leader)], LAGGING, 0, LAGGING_SIZE)
    launcher.kill(cluster.pods.pods.pop((namespace, "b", leader)))

    await replication(kube, namespace, "orders",
                      lambda r: r.leader is None and r.phase == "Unavailable",
                      what="no leader with one member answering")
    launcher.pause(cluster.pods.pods[(namespace, "b", lagging)], paused=False)
    stream = await replication(kube, namespace, "orders",
                               lambda r: r.leader is not None and r.phase == "Ready",
                               what="a leader once two members answer")
    assert record_of(stream).leader == current
    address = cluster.pods.pods[(namespace, "b", current)]
    assert await read_all(address, "orders", LAGGING) == [body(i, LAGGING_SIZE) for i in range(LAGGING)]


async def test_an_election_left_half_done_is_driven_again(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:
    """An operator that died after reserving epoch 2 and fencing every member with it: the
    stream has no leader and nobody to assign one. The running operator takes it from the
    status: epoch 3, a leader, publishes confirmed again."""
    _, _, stream = replicated_stream
    record = record_of(stream)
    reserved = Replication(record.epoch + 1, None, record.members, (), "Electing", "Electing")
    # Its steps, in the state they leave (fenced first here: the running operator, seeing no
    # leader in the status, would otherwise fence with a later epoch in between).
    members = Members(lambda m: cluster.pods.pods[(namespace, "b", m)])
    for m in record.members:
        assert await members.fence(m, "orders", reserved.epoch) is not None
    await kube.patch("Stream", namespace, "orders",
                     {"status": {"replication": reserved.to_dict()}}, subresource="status")
    stream = await replication(kube, namespace, "orders",
                               lambda r: r.epoch == reserved.epoch + 1 and r.phase == "Ready",
                               what="elected in the next epoch")
    leader = record_of(stream).leader
    assert leader is not None
    await publish(cluster.pods.pods[(namespace, "b", leader)], MESSAGES, 0)


async def test_leadership_leaves_a_pod_being_deleted(
        cluster: Cluster, kube: Kube, namespace: str,
        replicated_stream: tuple[Kubelet, PeeredLauncher, dict[str, Any]]) -> None:
    """The leader's Pod gets a deletionTimestamp (a drain, a roll) while its broker still
    runs, as in its termination grace period: another member leads before it stops, though
    the old leader holds every message; the old one follows in the new epoch meanwhile."""
    _, _, stream = replicated_stream
    for ordinal in range(PODS):  # the Pod objects the StatefulSet controller would make
        await kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"b-{ordinal}", "namespace": namespace, "labels": names.selector("b"),
            "finalizers": ["tests.streamlet.dev/terminating"]}})
    record = record_of(stream)
    old = record.leader
    assert old is not None
    await publish(cluster.pods.pods[(namespace, "b", old)], MESSAGES, 0)
    try:
        await kube.delete("Pod", namespace, f"b-{old}")  # held by the finalizer: terminating
        stream = await replication(kube, namespace, "orders",
                                   lambda r: r.leader not in (None, old) and r.phase == "Ready"
                                   and set(r.in_sync) == {0, 1, 2},
                                   what="leadership moved, the old leader following")
        new = record_of(stream).leader
        assert new is not None
        await publish(cluster.pods.pods[(namespace, "b", new)], MESSAGES, MESSAGES)
        expected = [f"m{i}".encode() for i in range(2 * MESSAGES)]
        assert await read_all(cluster.pods.pods[(namespace, "b", old)], "orders", 2 * MESSAGES) == expected
    finally:
        for ordinal in range(PODS):
            await kube.patch("Pod", namespace, f"b-{ordinal}", {"metadata": {"finalizers": []}})
