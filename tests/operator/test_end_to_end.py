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

from streamlet_operator.kube import Kube
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.test_stream import gone, ready, running_broker, stream_body

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
