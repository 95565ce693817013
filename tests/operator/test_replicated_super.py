"""A replicated super stream on Kubernetes, end to end: a Stream with partitions 3 and
replicas 3 on three real broker processes (pods that know their peers), the real operator
against the emulated API server.

Every partition is made with three members, its leader on its own pod (the broker that took
the Create spread them); the placement driver records each partition in
``status.partitionReplication``, names its leader in ``status.placement`` and the directory;
the pod leading one partition killed (kill -9), that partition gets a new leader, a publish
to it is confirmed and what was confirmed before is still there; deleting the Stream removes
every partition on every pod.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet_operator import names
from streamlet_operator.brokers import Address, ClientBrokerAdmin
from streamlet_operator.failover import FORCE_LEADER, PARTITIONS_FIELD, Replication
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually, read_all
from tests.operator.kubelet import Kubelet
from tests.operator.peers import PeeredLauncher, delete_streams, stop_pods
from tests.operator.test_broker import condition
from tests.operator.test_stream import running_broker, stream_body

pytestmark = pytest.mark.process

PODS = 3
PARTITIONS = [f"orders-{i}" for i in range(3)]
MESSAGES = 200
# Detection takes 3 probes a second apart, then an election: well inside this under load.
FAILOVER_S = 90


def records(stream: dict[str, Any] | None) -> dict[str, Replication]:
    """Each partition's record (those written)."""
    by_partition = ((stream or {}).get("status") or {}).get(PARTITIONS_FIELD) or {}
    result = {}
    for name, doc in by_partition.items():
        record = Replication.from_status({"replication": doc})
        if record is not None:
            result[name] = record
    return result


async def partitions_when(kube: Kube, namespace: str, check: Any, what: str,
                          timeout: float = FAILOVER_S) -> dict[str, Any]:
    """The Stream once its partitions' records pass ``check`` (a dict of every partition)."""
    async def look() -> Any:
        s = await kube.get("Stream", namespace, "orders")
        got = records(s)
        return s if set(got) == set(PARTITIONS) and check(got) else None

    result: dict[str, Any] = await eventually(look, timeout=timeout, what=what)
    return result


def body(i: int) -> bytes:
    return f"m{i}".encode()


async def publish(address: Address, stream: str, count: int, start: int) -> None:
    """``count`` messages to ``stream``, every one confirmed."""
    client = await connect(*address)
    try:
        producer = await client.producer(stream)
        await producer.send_many([body(i) for i in range(start, start + count)])
        await producer.flush()
        await producer.close()
    finally:
        await client.close()


async def directory(kube: Kube, namespace: str) -> dict[str, Any]:
    cm = await kube.get("ConfigMap", namespace, names.directory_configmap("b")) or {}
    doc: dict[str, Any] = json.loads((cm.get("data") or {}).get(names.DIRECTORY_KEY) or "{}")
    return doc


async def held(admin: ClientBrokerAdmin, address: Address) -> list[str]:
    """The partitions the pod at ``address`` holds."""
    async with admin.session(address, "guest", "guest") as session:
        return [p for p in PARTITIONS if await session.stream_exists(p)]


@pytest.fixture
async def pods(cluster: Cluster, kube: Kube, namespace: str,
               tmp_path: Path) -> AsyncIterator[tuple[Kubelet, PeeredLauncher]]:
    """Broker b running on PODS peered broker processes; after the test its Streams deleted
    while the pods still run (their finalizer deletes them on the pods), then the pods."""
    launcher = PeeredLauncher(tmp_path)
    launcher.plan(namespace, "b", PODS)
    kubelet = Kubelet(kube, cluster.pods, launcher)
    try:
        await running_broker(kube, kubelet, namespace, replicas=PODS)
        yield kubelet, launcher
    finally:
        await delete_streams(kube, namespace)
        stop_pods(cluster.pods.pods, launcher, namespace)


async def test_replicated_super_stream_fails_over_per_partition_and_deletes_everywhere(
        cluster: Cluster, kube: Kube, namespace: str,
        pods: tuple[Kubelet, PeeredLauncher]) -> None:
    kubelet, launcher = pods
    admin = ClientBrokerAdmin()
    try:
        await kube.create(stream_body(namespace, "orders", partitions=3, replicas=3))

        # Created: every partition with three members in sync, the leaders on distinct pods.
        stream = await partitions_when(
            kube, namespace, lambda rs: all(r.phase == "Ready" and len(r.in_sync) == 3
                                            for r in rs.values()),
            "every partition Ready with three members in sync")
        before = records(stream)
        assert all(r.members == (0, 1, 2) and r.epoch == 1 for r in before.values()), before
        leaders = {p: r.leader for p, r in before.items() if r.leader is not None}
        assert sorted(leaders.values()) == [0, 1, 2], before
        status = stream["status"]
        assert "replication" not in status  # a single stream's field: not a super stream's
        assert {p["stream"]: p["ordinal"] for p in status["placement"]} == leaders
        assert status["leader"] == f"b-{leaders['orders-0']}"
        assert condition(stream, "Available")["status"] == "True"
        assert condition(stream, "UnderReplicated")["status"] == "False"
        assert condition(stream, "Electing")["status"] == "False"

        async def named() -> Any:
            streams = (await directory(kube, namespace)).get("streams") or {}
            entries = [streams.get(p) for p in PARTITIONS]
            return entries if all(isinstance(e, dict) for e in entries) else None

        entries = await eventually(named, what="the directory names each partition's leader")
        for partition, entry in zip(PARTITIONS, entries, strict=True):
            host, port = cluster.pods.pods[(namespace, "b", leaders[partition])]
            assert entry["leader"] == f"{host}:{port}" and len(entry["replicas"]) == 2

        # kill -9 the pod leading orders-1: it gets a new leader; the others keep theirs.
        victim = "orders-1"
        old = leaders[victim]
        await publish(cluster.pods.pods[(namespace, "b", old)], victim, MESSAGES, 0)
        launcher.kill(cluster.pods.pods.pop((namespace, "b", old)))
        stream = await partitions_when(
            kube, namespace, lambda rs: rs[victim].epoch >= 2
            and rs[victim].leader not in (None, old) and rs[victim].phase == "Ready",
            f"a new leader for {victim}, Ready")
        after = records(stream)
        new = after[victim].leader
        assert new is not None
        assert set(after[victim].in_sync) <= {0, 1, 2} - {old}
        for partition in PARTITIONS:
            if partition != victim:  # led from pods that still run: not elected again
                assert after[partition].leader == leaders[partition], after
        placed = {p["stream"]: p["ordinal"] for p in stream["status"]["placement"]}
        assert placed[victim] == new

        async def under_replicated() -> Any:  # the next look sees the dead pod out of sync
            s = await kube.get("Stream", namespace, "orders")
            c = condition(s or {}, "UnderReplicated")
            return c if c.get("status") == "True" and victim in c.get("message", "") else None

        await eventually(under_replicated, timeout=FAILOVER_S,
                         what="UnderReplicated naming the partition")
        address = cluster.pods.pods[(namespace, "b", new)]

        async def renamed() -> Any:
            entry = ((await directory(kube, namespace)).get("streams") or {}).get(victim)
            return entry if (isinstance(entry, dict)
                             and entry["epoch"] == after[victim].epoch) else None

        entry = await eventually(renamed, what="the directory names the new leader")
        assert entry["leader"] == f"{address[0]}:{address[1]}"
        await publish(address, victim, MESSAGES, MESSAGES)  # confirmed: a majority holds them
        assert await read_all(address, victim, 2 * MESSAGES) == [
            body(i) for i in range(2 * MESSAGES)]

        # The pod comes back, then the Stream is deleted: no partition left on any pod.
        kubelet.restart(namespace, "b", old)
        for ordinal in range(PODS):
            assert await held(admin, cluster.pods.pods[(namespace, "b", ordinal)]) == PARTITIONS
        await kube.delete("Stream", namespace, "orders")

        async def gone() -> bool:
            return await kube.get("Stream", namespace, "orders") is None

        await eventually(gone, timeout=FAILOVER_S, what="the Stream finalized")
        for ordinal in range(PODS):
            assert await held(admin, cluster.pods.pods[(namespace, "b", ordinal)]) == []
    finally:
        await admin.close()


async def test_two_copies_of_each_partition_on_three_pods(
        cluster: Cluster, kube: Kube, namespace: str,
        pods: tuple[Kubelet, PeeredLauncher]) -> None:
    """replicas 2 on 3 pods: each partition on two of them, so the pod that took the Create
    does not hold every partition; the Stream is still Ready, each partition recorded with
    its two members and its leader, and the directory names them. The force-leader
    annotation naming two partitions elects each one's named member, and only theirs."""
    await kube.create(stream_body(namespace, "orders", partitions=3, replicas=2))
    stream = await partitions_when(
        kube, namespace, lambda rs: all(r.phase == "Ready" and len(r.in_sync) == 2
                                        for r in rs.values()),
        "every partition Ready with two members in sync")
    got = records(stream)
    assert all(len(r.members) == 2 and r.leader in r.members for r in got.values()), got
    assert condition(stream, "Available")["status"] == "True"

    async def ready() -> Any:
        s = await kube.get("Stream", namespace, "orders")
        return s if condition(s, "Ready").get("status") == "True" else None

    await eventually(ready, timeout=FAILOVER_S, what="Ready")
    streams = (await directory(kube, namespace)).get("streams") or {}
    for partition, record in got.items():
        assert record.leader is not None
        host, port = cluster.pods.pods[(namespace, "b", record.leader)]
        assert streams[partition]["leader"] == f"{host}:{port}"
        await publish((host, port), partition, 10, 0)

    # Forced, two partitions named: each elects its other member; the third is left
    # alone; the annotation goes once both are done.
    wanted = {p: next(m for m in got[p].members if m != got[p].leader)
              for p in PARTITIONS[:2]}
    await kube.patch("Stream", namespace, "orders", {"metadata": {"annotations": {
        FORCE_LEADER: ",".join(f"{p}={m}" for p, m in wanted.items())}}})
    stream = await partitions_when(
        kube, namespace, lambda rs: all(rs[p].leader == m for p, m in wanted.items()),
        "the two named partitions led by their forced members")
    after = records(stream)
    assert all(after[p].epoch == got[p].epoch + 1 for p in wanted), after
    assert after[PARTITIONS[2]] == got[PARTITIONS[2]]

    async def unannotated() -> Any:
        s = await kube.get("Stream", namespace, "orders")
        return s if FORCE_LEADER not in ((s or {})["metadata"].get("annotations")
                                         or {}) else None

    await eventually(unannotated, timeout=FAILOVER_S, what="the annotation removed")
