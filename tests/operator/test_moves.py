"""A move under live traffic loses no confirmed message: rstream's Producer keeps publishing
while the operator moves the stream off a pod being removed; every message whose send_wait
returned is in the stream on the new pod exactly once, and the move waited for the old pod's
seal (the test delivers the directory ConfigMap to the pods as the kubelet would)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

from rstream import AMQPMessage, Producer

from streamlet.client import connect
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.test_broker import condition
from tests.operator.test_stream import ready, stream_body

SENDERS = 4
MARK = b"live-msg:"


async def test_a_move_under_live_traffic_loses_no_confirmed_message(
        cluster: Cluster, kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    await kube.create({"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
                       "metadata": {"name": "b", "namespace": namespace},
                       "spec": {"replicas": 2, "scaleDownPolicy": "MoveStreams"}})
    await eventually(lambda: kube.get("StatefulSet", namespace, "b"))
    pods = await kubelet.sync(namespace, "b")
    await kube.create(stream_body(namespace, "stays"))
    await ready(kube, namespace, "stays")
    await kube.create(stream_body(namespace, "live"))
    assert (await ready(kube, namespace, "live"))["status"]["leader"] == "b-1"
    await kubelet.sync_directory(namespace, "b")

    confirmed: list[bytes] = []
    failed = 0
    stop = asyncio.Event()
    # Given pod 0's address (it stays): Metadata sends the producer to pod 1, then to pod 0.
    producer = Producer(*pods[0], username="guest", password="guest")
    await producer.start()

    async def send(sender: int) -> None:
        nonlocal failed
        i = 0
        while not stop.is_set():
            body = f"{MARK.decode()}{sender}-{i}".encode()
            i += 1
            try:
                await asyncio.wait_for(producer.send_wait("live", AMQPMessage(body=body)), 5)
            except Exception:  # refused by the sealed stream, or in the middle of recovering
                failed += 1
                await asyncio.sleep(0.05)
                continue
            confirmed.append(body)

    async def at_least(n: int) -> bool:
        return len(confirmed) >= n

    senders = [asyncio.create_task(send(s)) for s in range(SENDERS)]
    try:
        await eventually(lambda: at_least(200), what="messages confirmed on pod 1")
        await kube.patch("Broker", namespace, "b", {"spec": {"replicas": 1}})
        async with kubelet.delivering_directory(namespace, "b"):
            async def moved() -> Any:
                s = await kube.get("Stream", namespace, "live")
                st = (s or {}).get("status") or {}
                return s if (st.get("leader") == "b-0" and not st.get("move") and condition(
                    s, "Ready").get("status") == "True") else None
            done = await eventually(moved, what="the move finished")
            before = len(confirmed)
            await eventually(lambda: at_least(before + 200), what="publishing on pod 0")
    finally:
        stop.set()
        await asyncio.gather(*senders, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.close(), 5)

    assert not await cluster.probe.exists(pods[1], "live")
    client = await connect(*pods[0])
    try:
        stats = await client.stream_stats("live")
        assert stats["sealed"] == 0
        reader = await client.consumer("live", offset="first")
        stored: list[bytes] = []
        async for _header, records, _first in reader.chunks():
            stored += [bytes(r) for r in records]
            if _header.chunk_id >= stats["last_chunk_id"]:
                break
        await reader.close()
    finally:
        await client.close()
    # rstream wraps bodies in AMQP 1.0: the payload is the record's suffix.
    counts = Counter(MARK + record.rsplit(MARK, 1)[1] for record in stored if MARK in record)
    lost = [b for b in confirmed if counts[b] == 0]
    doubled = [b for b in confirmed if counts[b] > 1]
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {lost[:3]}"
    assert not doubled, f"{len(doubled)} confirmed messages stored twice, e.g. {doubled[:3]}"
    assert condition(done, "Ready")["reason"] == "StreamReady"
    events = [e for e in await kube.list("Event", namespace) if e.get("reason") == "StreamMoved"]
    assert events and "moved from b-1 to b-0" in events[0]["message"]
