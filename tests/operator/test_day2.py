"""Day-2 annotations on Brokers and Streams against the real operator and an emulated API server."""

from __future__ import annotations

from typing import Any

from streamlet_operator.day2 import PAUSE, PAUSED, RESUMED
from streamlet_operator.kube import Kube
from tests.operator.harness import eventually
from tests.operator.test_broker import broker_body, condition
from tests.operator.test_stream import stream_body


async def _event(kube: Kube, namespace: str, kind: str, name: str, reason: str) -> list[Any]:
    async def posted() -> list[Any] | None:
        found = [e for e in await kube.list("Event", namespace)
                 if e.get("reason") == reason and e["involvedObject"]["kind"] == kind
                 and e["involvedObject"]["name"] == name]
        return found or None
    found: list[Any] = await eventually(posted, what=f"Event {reason} on {kind} {name}")
    return found


async def _replicas(kube: Kube, namespace: str, name: str, wanted: int) -> Any:
    async def scaled() -> Any:
        sts = await kube.get("StatefulSet", namespace, name)
        return sts if sts and sts["spec"]["replicas"] == wanted else None
    return await eventually(scaled, what=f"StatefulSet {name} with {wanted} replicas")


async def test_a_paused_broker_is_left_alone_until_resumed(kube: Kube, namespace: str) -> None:
    await kube.create(broker_body(namespace, "b", replicas=1))
    await kube.create(broker_body(namespace, "c", replicas=1))  # the witness, not paused
    await _replicas(kube, namespace, "b", 1)
    await _replicas(kube, namespace, "c", 1)
    await kube.patch("Broker", namespace, "b", {"metadata": {"annotations": {PAUSE: "true"}}})

    async def paused() -> Any:
        b = await kube.get("Broker", namespace, "b")
        return b if condition(b, PAUSED).get("status") == "True" else None
    b = await eventually(paused, what="ReconciliationPaused=True")
    assert PAUSE in condition(b, PAUSED)["message"]
    await _event(kube, namespace, "Broker", "b", PAUSED)
    generation = b["status"]["observedGeneration"]

    # A spec change and a deleted child: the witness takes both, the paused Broker neither.
    assert await kube.delete("Service", namespace, "b")
    assert await kube.delete("Service", namespace, "c")
    for name in ("b", "c"):
        await kube.patch("Broker", namespace, name, {"spec": {"replicas": 2}})
    await _replicas(kube, namespace, "c", 2)
    await eventually(lambda: kube.get("Service", namespace, "c"), what="c's Service re-made")
    sts = await kube.get("StatefulSet", namespace, "b")
    assert sts is not None and sts["spec"]["replicas"] == 1
    assert await kube.get("Service", namespace, "b") is None
    b = await kube.get("Broker", namespace, "b")
    assert b is not None and b["status"]["observedGeneration"] == generation
    assert len([e for e in await kube.list("Event", namespace) if e.get("reason") == PAUSED]) == 1

    await kube.patch("Broker", namespace, "b", {"metadata": {"annotations": {PAUSE: None}}})
    await _replicas(kube, namespace, "b", 2)
    await eventually(lambda: kube.get("Service", namespace, "b"), what="b's Service re-made")

    async def resumed() -> Any:
        b = await kube.get("Broker", namespace, "b")
        return b if b and not condition(b, PAUSED) else None
    await eventually(resumed, what="ReconciliationPaused gone")
    await _event(kube, namespace, "Broker", "b", RESUMED)


async def test_a_paused_stream_is_left_alone_until_resumed(kube: Kube, namespace: str) -> None:
    # No Broker "nowhere": a Stream reconciled says so in its status; a paused one does not.
    await kube.create({**stream_body(namespace, "s", broker="nowhere"),
                       "metadata": {"name": "s", "namespace": namespace,
                                    "annotations": {PAUSE: "true"}}})
    await kube.create(stream_body(namespace, "w", broker="nowhere"))  # the witness

    async def reconciled(name: str) -> Any:
        s = await kube.get("Stream", namespace, name)
        return s if (s or {}).get("status", {}).get("phase") else None
    await eventually(lambda: reconciled("w"), what="the witness reconciled")
    s = await eventually(lambda: kube.get("Stream", namespace, "s"))

    async def paused() -> Any:
        s = await kube.get("Stream", namespace, "s")
        return s if condition(s, PAUSED).get("status") == "True" else None
    s = await eventually(paused, what="the Stream's ReconciliationPaused=True")
    assert "phase" not in s["status"]
    await _event(kube, namespace, "Stream", "s", PAUSED)

    await kube.patch("Stream", namespace, "s", {"metadata": {"annotations": {PAUSE: None}}})
    s = await eventually(lambda: reconciled("s"), what="the Stream reconciled once resumed")
    assert not condition(s, PAUSED)
    await _event(kube, namespace, "Stream", "s", RESUMED)
