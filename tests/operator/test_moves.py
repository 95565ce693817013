"""A move under live traffic loses no confirmed message: rstream's Producer keeps publishing
while the operator moves the stream off a pod being removed; every message whose send_wait
returned is in the stream on the new pod exactly once, and the move waited for the old pod's
seal (the test delivers the directory ConfigMap to the pods as the kubelet would)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import pytest
from rstream import AMQPMessage, Producer

from streamlet.client import connect
from streamlet_operator.brokers import BrokerUnavailable, ClientBrokerAdmin
from streamlet_operator.handlers.common import write_status
from streamlet_operator.handlers.stream import reconcile_stream
from streamlet_operator.kube import Kube
from streamlet_operator.model import BrokerModel, StreamModel
from streamlet_operator.runtime import Runtime
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.test_broker import condition
from tests.operator.test_stream import two_pods_and_a_stream_on_b1
from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process

SENDERS = 4
MARK = b"live-msg:"


async def test_a_move_under_live_traffic_loses_no_confirmed_message(
        cluster: Cluster, kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    pods = await two_pods_and_a_stream_on_b1(kube, kubelet, namespace, "live")
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
            seen: dict[str, Any] = {}

            async def moved() -> Any:
                s = await kube.get("Stream", namespace, "live")
                st = seen["status"] = (s or {}).get("status") or {}
                return s if (st.get("leader") == "b-0" and not st.get("move") and condition(
                    s, "Ready").get("status") == "True") else None
            # How long the move takes follows how much the producers sent before the seal,
            # which depends on the machine (the copy's speed is test_brokers' business): a
            # bound to catch a move that never ends, not a slow one.
            try:
                done = await eventually(moved, timeout=180, what="the move finished")
            except AssertionError as e:
                raise AssertionError(f"{e}; the Stream's status then: {seen}") from None
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


@contextlib.asynccontextmanager
async def versions(cluster: Cluster, namespace: str, name: str) -> AsyncIterator[list[Any]]:
    """Every version of the Stream written while in the block, as a watch delivers them."""
    seen: list[Any] = []
    started = asyncio.Event()
    url = f"{cluster.url}/apis/streamlet.dev/v1alpha1/namespaces/{namespace}/streams"

    async def watch(http: aiohttp.ClientSession) -> None:
        listed = await (await http.get(url)).json()
        params = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
        async with http.get(url, params=params) as resp:
            started.set()
            async for line in resp.content:
                if line.strip():
                    event = json.loads(line)
                    if event["object"]["metadata"]["name"] == name:
                        seen.append(event["object"])

    async with aiohttp.ClientSession() as http:
        task = asyncio.create_task(watch(http))
        await asyncio.wait_for(started.wait(), 10)
        try:
            yield seen
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_a_moving_stream_is_never_reported_ready(
        cluster: Cluster, kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    """From the first status naming the new pod until the old pod's stream is gone, the Stream
    is not Ready: a client waiting for Ready (kubectl wait) must not go on while the old pod
    still takes publishes. The move's first status write once left Ready=True, and a move
    finished in the pass that started it left status.move behind for the next pass (which
    then reported the move twice)."""
    await two_pods_and_a_stream_on_b1(kube, kubelet, namespace, "moving")
    async with versions(cluster, namespace, "moving") as seen, \
            kubelet.delivering_directory(namespace, "b"):
        await kube.patch("Broker", namespace, "b", {"spec": {"replicas": 1}})

        async def moved() -> Any:
            st = ((await kube.get("Stream", namespace, "moving")) or {}).get("status") or {}
            return st.get("leader") == "b-0" and not st.get("move")
        await eventually(moved, timeout=60, what="the move finished")
        done = await kube.get("Stream", namespace, "moving")
        assert done is not None
        version = done["metadata"]["resourceVersion"]
        await eventually(lambda: any(v["metadata"]["resourceVersion"] == version for v in seen),
                         what="the watch delivering the last version")
    assert condition(done, "Ready")["status"] == "True"
    assert not await cluster.probe.exists(kubelet.pods.pods[(namespace, "b", 1)], "moving")
    statuses = [v.get("status") or {} for v in seen]
    during = [st for st in statuses if st.get("move")]
    assert during, "no status recorded the move"
    for st in during:
        ready_ = next(c for c in st["conditions"] if c["type"] == "Ready")
        assert st["phase"] != "Ready" and ready_["status"] == "False", st
    assert during[0]["phase"] == "Moving" and during[0]["leader"] == "b-0"
    assert statuses[-1]["phase"] == "Ready" and not statuses[-1].get("move")

    async def reported() -> list[Any]:
        return [e for e in await kube.list("Event", namespace) if e.get("reason") == "StreamMoved"]
    events = await eventually(reported, what="a StreamMoved event")
    assert len(events) == 1, [e["message"] for e in events]


class _Api:
    """The few API calls one Stream pass makes, in memory: the Broker, and the status the
    pass writes in the middle (a move) applied as the API server would."""

    def __init__(self, broker: dict[str, Any], stream: dict[str, Any]) -> None:
        self.broker, self.stream = broker, stream
        self.on_status: Any = None

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.broker if kind == "Broker" else None

    async def list(self, kind: str, namespace: str,
                   labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        return []  # no Pods either: none drained

    async def apply(self, obj: dict[str, Any], immutable: tuple[str, ...] = ()) -> dict[str, Any]:
        return obj

    async def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any],
                    subresource: str | None = None) -> dict[str, Any]:
        assert (kind, subresource) == ("Stream", "status")
        self.stream["status"] = {**self.stream["status"], **patch["status"]}
        if self.on_status is not None:
            self.on_status()
        return self.stream


async def test_a_pass_failing_after_a_move_started_keeps_the_new_placement(
        broker_factory: Any) -> None:
    """The pass that starts a move writes the new placement at once; if the rest of that pass
    fails (here the old pod goes away just then), its final status must not put the old
    placement back: a later pass would take the stream for one on the old pod."""
    pods: list[BrokerProcess] = [broker_factory(), broker_factory()]
    client = await connect(pods[1].host, pods[1].port)
    try:
        await client.create_stream("s")
        producer = await client.producer("s")
        await producer.send_many([b"m%d" % i for i in range(10)])
        await producer.close()
    finally:
        await client.close()
    broker = {"metadata": {"name": "b", "namespace": "ns", "generation": 2},
              "spec": {"replicas": 1, "scaleDownPolicy": "MoveStreams"}}
    stream: dict[str, Any] = {"metadata": {"name": "s", "namespace": "ns", "generation": 1},
                              "spec": {"broker": "b"}}
    ready_ = {"type": "Ready", "status": "True", "reason": "StreamReady", "message": "",
              "lastTransitionTime": "2026-01-01T00:00:00Z"}
    stream["status"] = {"phase": "Ready", "leader": "b-1", "conditions": [ready_],
                        "applied": StreamModel.from_body(stream).immutable(),
                        "placement": [{"stream": "s", "pod": "b-1", "ordinal": 1}]}
    api = _Api(broker, stream)
    gone: set[int] = set()

    def resolve(namespace: str, name: str, ordinal: int, port: int) -> tuple[str, int]:
        if ordinal in gone:
            raise BrokerUnavailable(f"pod {name}-{ordinal} is not running")
        return pods[ordinal].host, pods[ordinal].port

    async def guest(namespace: str, name: str) -> tuple[str, str]:
        return "guest", "guest"

    async def advertised(model: BrokerModel, ordinal: int) -> str:
        return f"{pods[ordinal].host}:{pods[ordinal].port}"

    api.on_status = lambda: gone.add(1)  # the old pod goes once the move is recorded
    admin = ClientBrokerAdmin()
    runtime = Runtime(kube=api, admin=admin, resolve=resolve,  # type: ignore[arg-type]
                      credentials=guest, advertised=advertised)
    raw = {**stream, "status": dict(stream["status"])}  # as _run hands it over
    try:
        status, _ = await reconcile_stream(raw, runtime, None, logging.getLogger(__name__))
    finally:
        await admin.close()
    assert status["move"]["to"] == 0 and status["leader"] == "b-0"
    assert condition({"status": status}, "Ready")["status"] == "False"
    patch = kopf.Patch()
    write_status(patch, raw.get("status"), status)
    final = {**api.stream["status"], **patch.status}
    assert final["placement"] == [{"stream": "s", "pod": "b-0", "ordinal": 0}], final
    assert final["leader"] == "b-0" and final["move"]["from"] == 1
