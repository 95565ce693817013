"""The stream directory end to end: the operator writes where each stream lives into a
ConfigMap, the test (as the kubelet) puts it in the file every pod's broker reads, and rstream,
given the address of one pod only, reaches streams on the others, and follows a moved stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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
from streamlet_operator.brokers import Address
from streamlet_operator.directory import pod_address
from streamlet_operator.kube import Kube
from streamlet_operator.model import BrokerModel
from streamlet_operator.runtime import Runtime
from tests.operator.conftest import Cluster
from tests.operator.harness import eventually, read_all
from tests.operator.kubelet import Kubelet
from tests.operator.test_broker import condition
from tests.operator.test_stream import ready, running_broker, stream_body

MESSAGES = 30


def _at(address: Address) -> str:
    return f"{address[0]}:{address[1]}"


async def _directory_lists(kubelet: Kubelet, namespace: str, expected: dict[str, Address]) -> Any:
    """Wait until the pods' directory file maps exactly these streams to these pods."""
    async def check() -> Any:
        text = await kubelet.sync_directory(namespace, "b")
        doc = json.loads(text) if text else {}
        return doc if doc.get("streams") == {k: _at(v) for k, v in expected.items()} else None
    return await eventually(check, what=f"directory listing {expected}")


async def _leader_via(address: Address, stream: str) -> Address | None:
    """The leader a Metadata request to ``address`` names for ``stream``."""
    client = await connect(*address)
    try:
        meta = await client.metadata([stream])
    finally:
        await client.close()
    brokers = {b.reference: (b.host, b.port) for b in meta.brokers}
    return brokers.get(meta.streams[0].leader)


async def _pods_know(address: Address, stream: str, leader: Address) -> None:
    """The broker re-reads its directory file at most once a second: wait until it has."""
    async def check() -> bool:
        return await _leader_via(address, stream) == leader
    await eventually(check, what=f"{address} naming {leader} for {stream}")


async def _holds(address: Address, stream: str) -> bool:
    """Whether the broker at ``address`` itself holds ``stream`` (StreamStats is local only)."""
    client = await connect(*address)
    try:
        await client.stream_stats(stream)
        return True
    except Exception:
        return False
    finally:
        await client.close()


@pytest.mark.process
async def test_any_pod_directs_clients_to_the_stream(cluster: Cluster, kube: Kube,
                                                     kubelet: Kubelet, namespace: str) -> None:
    await running_broker(kube, kubelet, namespace, replicas=2)
    await kube.create(stream_body(namespace, "filler"))
    assert (await ready(kube, namespace, "filler"))["status"]["leader"] == "b-0"
    await kube.create(stream_body(namespace, "events", partitions=1))
    assert (await ready(kube, namespace, "events"))["status"]["leader"] == "b-1"
    pod0, pod1 = (cluster.pods.pods[(namespace, "b", o)] for o in (0, 1))
    await _directory_lists(kubelet, namespace, {"filler": pod0, "events": pod1})
    await _pods_know(pod0, "events", pod1)
    assert not await _holds(pod0, "events") and await _holds(pod1, "events")

    # Given pod 0's address only (as a client of the Service would be), for a stream on pod 1.
    async with Producer(*pod0, username="guest", password="guest") as producer:
        for i in range(MESSAGES):
            await producer.send_wait("events", AMQPMessage(body=f"m{i}".encode()))
    received: list[bytes] = []

    async def on_message(message: AMQPMessage, context: MessageContext) -> None:
        received.append(bytes(message.body))

    consumer = Consumer(*pod0, username="guest", password="guest")
    await consumer.start()
    try:
        await consumer.subscribe("events", on_message, decoder=amqp_decoder, offset_specification=(
            ConsumerOffsetSpecification(OffsetType.FIRST, None)))

        async def all_in() -> bool:
            return len(received) >= MESSAGES
        await eventually(all_in, what="messages consumed through pod 0")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.close(), 5)
    assert received == [f"m{i}".encode() for i in range(MESSAGES)]
    assert not await _holds(pod0, "events")  # they went to pod 1, where it lives
    assert len(await read_all(pod1, "events", MESSAGES)) == MESSAGES

    await kube.delete("Stream", namespace, "events")
    await _directory_lists(kubelet, namespace, {"filler": pod0})


@pytest.mark.process
async def test_a_producer_follows_a_moved_stream(cluster: Cluster, kube: Kube, kubelet: Kubelet,
                                                 namespace: str) -> None:
    """Scale-down with MoveStreams: the producer (started from pod 1's address) publishes to the
    stream on pod 2, gets MetadataUpdate when it moves to pod 0, and its next publish goes to
    pod 0, found through pod 1's directory."""
    await kube.create({"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
                       "metadata": {"name": "b", "namespace": namespace},
                       "spec": {"replicas": 3, "scaleDownPolicy": "MoveStreams"}})
    await eventually(lambda: kube.get("StatefulSet", namespace, "b"))
    pods = await kubelet.sync(namespace, "b")
    for name, leader in (("f0", "b-0"), ("f1", "b-1"), ("moves", "b-2")):
        await kube.create(stream_body(namespace, name))
        assert (await ready(kube, namespace, name))["status"]["leader"] == leader
    await _directory_lists(kubelet, namespace, {"f0": pods[0], "f1": pods[1], "moves": pods[2]})
    await _pods_know(pods[1], "moves", pods[2])

    closed: list[OnClosedErrorInfo] = []

    async def on_close(info: OnClosedErrorInfo) -> None:
        closed.append(info)

    producer = Producer(*pods[1], username="guest", password="guest", on_close_handler=on_close)
    await producer.start()
    stack = contextlib.AsyncExitStack()
    try:
        for i in range(MESSAGES):
            await producer.send_wait("moves", AMQPMessage(body=f"before{i}".encode()))
        await kube.patch("Broker", namespace, "b", {"spec": {"replicas": 2}})
        await stack.enter_async_context(kubelet.delivering_directory(namespace, "b"))

        async def told() -> list[OnClosedErrorInfo]:
            return [c for c in closed if c.reason == "Metadata Update"]
        assert (await eventually(told, what="MetadataUpdate from pod 2"))[0].streams == ["moves"]
        moved = await ready(kube, namespace, "moves")
        assert moved["status"]["leader"] == "b-0"
        await _directory_lists(kubelet, namespace, {"f0": pods[0], "f1": pods[1],
                                                    "moves": pods[0]})
        await _pods_know(pods[1], "moves", pods[0])

        async def publisher_dropped() -> bool:
            # rstream forgets the publisher in a task started by the MetadataUpdate
            return producer._find_producer_by_stream("moves") is None  # noqa: SLF001
        await eventually(publisher_dropped, what="rstream dropping its publisher on pod 2")
        for i in range(MESSAGES):
            await producer.send_wait("moves", AMQPMessage(body=f"after{i}".encode()))
    finally:
        await stack.aclose()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.close(), 5)
    bodies = await read_all(pods[0], "moves", 2 * MESSAGES)
    assert [b[-len(f"after{i}"):] for i, b in enumerate(bodies[MESSAGES:])] == [
        f"after{i}".encode() for i in range(MESSAGES)]
    assert all(b.endswith(f"before{i}".encode()) for i, b in enumerate(bodies[:MESSAGES]))
    assert condition(moved, "Ready")["status"] == "True"


async def test_pod_ip_and_dns_addresses(kube: Kube, namespace: str) -> None:
    """Without the tests' resolver: PodDNS from the spec, PodIP from the pod's status."""
    def model(**spec: Any) -> BrokerModel:
        return BrokerModel.from_body({"metadata": {"name": "b", "namespace": namespace},
                                      "spec": spec})
    runtime = Runtime(kube=kube)
    assert await pod_address(runtime, model(), 1) == (
        f"b-1.b-headless.{namespace}.svc.cluster.local:5552")
    pod_ip = model(advertise={"mode": "PodIP", "port": 30000})
    assert await pod_address(runtime, pod_ip, 0) is None  # no pod yet: left out
    await kube.create({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "b-0", "namespace": namespace},
                       "spec": {"containers": [{"name": "broker", "image": "x"}]}})
    await kube.patch("Pod", namespace, "b-0", {"status": {"podIP": "fd00::7"}},
                     subresource="status")
    assert await pod_address(runtime, pod_ip, 0) == "[fd00::7]:30000"
