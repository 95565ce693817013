"""End to end on this machine: a Stream resource becomes a stream real clients use.

The test plays the kubelet (a real broker process per pod of the StatefulSet the operator
made); the operator places the Stream, creates it on that pod through the protocol; rstream,
RabbitMQ's own Python client, publishes and consumes through it; deleting the resource deletes
the stream, and the broker tells the connected client with MetadataUpdate.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    OnClosedErrorInfo,
    Producer,
    amqp_decoder,
)

from streamlet.client import connect
from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.test_broker import condition
from tests.operator.test_stream import (
    gone,
    ready,
    running_broker,
    stream_body,
    two_pods_and_a_stream_on_b1,
)

pytestmark = pytest.mark.process

MESSAGES = 50


async def test_stream_resource_to_clients_and_back(cluster: Cluster, kube: Kube,
                                                   kubelet: Kubelet, namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=2)
    await kube.create(stream_body(namespace, "filler"))
    assert (await ready(kube, namespace, "filler"))["status"]["leader"] == "b-0"
    await kube.create(stream_body(namespace, "events", retention={"maxAge": "1h"}))
    assert (await ready(kube, namespace, "events"))["status"]["leader"] == "b-1"
    host, port = cluster.pods.pods[(namespace, "b", 1)]
    assert await cluster.probe.exists((host, port), "events")
    assert not await cluster.probe.exists(cluster.pods.pods[(namespace, "b", 0)], "events")

    async with Producer(host, port, username="guest", password="guest") as producer:
        for i in range(MESSAGES):
            await producer.send_wait("events", AMQPMessage(body=f"m{i}".encode()))

    received: list[bytes] = []
    closed: list[OnClosedErrorInfo] = []

    async def on_message(message: AMQPMessage, context: MessageContext) -> None:
        received.append(bytes(message.body))

    async def on_close(info: OnClosedErrorInfo) -> None:
        closed.append(info)

    consumer = Consumer(host, port, username="guest", password="guest",
                        on_close_handler=on_close)
    await consumer.start()
    try:
        await consumer.subscribe("events", on_message, decoder=amqp_decoder, offset_specification=(
            ConsumerOffsetSpecification(OffsetType.FIRST, None)))

        async def all_received() -> bool:
            return len(received) >= MESSAGES

        await eventually(all_received, what=f"{MESSAGES} messages consumed")
        assert received == [f"m{i}".encode() for i in range(MESSAGES)]

        async def offsets_reported() -> Any:
            s = await kube.get("Stream", namespace, "events")
            st = (s or {}).get("status") or {}
            return st if st.get("committedOffset", -1) >= 0 else None

        status = await eventually(offsets_reported, what="committed offset in status")
        assert status["firstOffset"] == 0 and status["lastOffset"] >= status["committedOffset"]

        await kube.delete("Stream", namespace, "events")
        await gone(kube, "Stream", namespace, "events")

        async def told() -> list[OnClosedErrorInfo]:
            return [c for c in closed if c.reason == "Metadata Update"]

        updates = await eventually(told, what="MetadataUpdate delivered to the rstream consumer")
        assert updates[0].streams == ["events"]
        assert not await cluster.probe.exists((host, port), "events")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.close(), 5)


async def test_scale_down_moves_streams(cluster: Cluster, kube: Kube, kubelet: Kubelet,
                                        namespace: str) -> None:
    """With scaleDownPolicy MoveStreams, the streams of a removed pod move to the remaining
    ones with their messages; clients on the old pod get MetadataUpdate; then the pod goes."""
    await two_pods_and_a_stream_on_b1(kube, kubelet, namespace, "moves")
    old = cluster.pods.pods[(namespace, "b", 1)]
    async with Producer(*old, username="guest", password="guest") as producer:
        for i in range(MESSAGES):
            await producer.send_wait("moves", AMQPMessage(body=f"m{i}".encode()))

    closed: list[OnClosedErrorInfo] = []

    async def on_close(info: OnClosedErrorInfo) -> None:
        closed.append(info)

    consumer = Consumer(*old, username="guest", password="guest", on_close_handler=on_close)
    await consumer.start()
    stack = contextlib.AsyncExitStack()
    try:
        await consumer.subscribe("moves", lambda m, c: None, decoder=amqp_decoder)
        await kube.patch("Broker", namespace, "b", {"spec": {"replicas": 1}})
        await stack.enter_async_context(kubelet.delivering_directory(namespace, "b"))

        async def moved() -> Any:
            s = await kube.get("Stream", namespace, "moves")
            st = (s or {}).get("status") or {}
            return s if st.get("leader") == "b-0" and condition(s, "Ready").get(
                "status") == "True" else None

        await eventually(moved, what="stream moved to b-0")

        async def told() -> list[OnClosedErrorInfo]:
            return [c for c in closed if c.reason == "Metadata Update"]

        assert (await eventually(told, what="MetadataUpdate on the old pod"))[0].streams == [
            "moves"]
    finally:
        await stack.aclose()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.close(), 5)

    new = cluster.pods.pods[(namespace, "b", 0)]
    assert not await cluster.probe.exists(old, "moves")
    client = await connect(*new)
    try:
        reader = await client.consumer("moves", offset="first")
        got = []
        async for message in reader:
            got.append((message.offset, message.body))
            if len(got) == MESSAGES:
                break
        await reader.close()
    finally:
        await client.close()
    # rstream wraps bodies in AMQP 1.0: compare the payloads by suffix, offsets exactly.
    assert [o for o, _ in got] == list(range(MESSAGES))
    assert all(body.endswith(f"m{i}".encode()) for i, (_, body) in enumerate(got))

    async def scaled() -> Any:
        sts = await kube.get("StatefulSet", namespace, "b")
        return sts if sts and sts["spec"]["replicas"] == 1 else None

    await eventually(scaled, what="StatefulSet scaled down after the move")
    events = [e for e in await kube.list("Event", namespace) if e.get("reason") == "StreamMoved"]
    assert events and "moved from b-1 to b-0" in events[0]["message"]
