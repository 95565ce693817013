"""Day-2 annotations on Brokers and Streams against the real operator and an emulated API server."""

from __future__ import annotations

from typing import Any

from streamlet_operator import names
from streamlet_operator.builders.statefulset import RESTARTED_AT, TEMPLATE_HASH
from streamlet_operator.day2 import (
    PAUSE,
    PAUSED,
    RESTART,
    RESTART_REQUESTED,
    RESTARTED_FIELD,
    RESUMED,
)
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


def _template(sts: dict[str, Any]) -> dict[str, Any]:
    return dict(sts["spec"]["template"]["metadata"]["annotations"])


async def _pods(kube: Kube, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    """The StatefulSet controller and kubelet of a Broker's pods, one step: a missing pod made
    from the template as it is now, Ready (no broker process: nothing here connects)."""
    sts = await kube.get("StatefulSet", namespace, name)
    assert sts is not None
    pods = {p["metadata"]["name"]: p for p in await kube.list("Pod", namespace,
                                                                labels=names.selector(name))}
    for ordinal in range(int(sts["spec"]["replicas"])):
        pod = names.pod(name, ordinal)
        if pod in pods:
            continue
        meta = sts["spec"]["template"]["metadata"]
        pods[pod] = await kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": pod, "namespace": namespace, "labels": dict(meta["labels"]),
            "annotations": dict(meta["annotations"])}})
        await kube.patch("Pod", namespace, pod, {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}}, subresource="status")
    return pods


async def _all_on(kube: Kube, namespace: str, revision: str) -> bool:
    pods = await _pods(kube, namespace, "b")
    return len(pods) == 2 and all(
        p["metadata"]["annotations"].get(TEMPLATE_HASH) == revision for p in pods.values())


async def test_a_restart_annotation_rolls_the_pods_once(kube: Kube, namespace: str) -> None:
    await kube.create(broker_body(namespace, "b", replicas=2))
    sts = await _replicas(kube, namespace, "b", 2)
    before = _template(sts)[TEMPLATE_HASH]
    await eventually(lambda: _all_on(kube, namespace, before), what="two pods up")
    uids = {p["metadata"]["uid"] for p in (await _pods(kube, namespace, "b")).values()}

    await kube.patch("Broker", namespace, "b", {"metadata": {"annotations": {RESTART: "t1"}}})

    async def new_template() -> Any:
        found = await kube.get("StatefulSet", namespace, "b")
        return found if found and _template(found)[TEMPLATE_HASH] != before else None
    sts = await eventually(new_template, what="a new pod template")
    after = _template(sts)[TEMPLATE_HASH]
    assert _template(sts)[RESTARTED_AT] == "t1"
    await eventually(lambda: _all_on(kube, namespace, after), what="every pod made again")
    assert not uids & {p["metadata"]["uid"] for p in (await _pods(kube, namespace, "b")).values()}
    b = await kube.get("Broker", namespace, "b")
    assert b is not None and b["status"][RESTARTED_FIELD] == "t1"
    await _event(kube, namespace, "Broker", "b", RESTART_REQUESTED)

    # The annotation gone (or left as it is): the value handled stays, nothing rolls again.
    await kube.patch("Broker", namespace, "b", {"metadata": {"annotations": {RESTART: None}},
                                                "spec": {"usersSecret": "absent"}})

    async def passed() -> Any:  # a Broker pass after the change: its condition says so
        b = await kube.get("Broker", namespace, "b")
        return b if condition(b, "UsersConfigured").get("status") == "False" else None
    await eventually(passed, what="a Broker pass after the annotation went")
    sts = await kube.get("StatefulSet", namespace, "b")
    assert sts is not None and _template(sts)[TEMPLATE_HASH] == after
    assert await _all_on(kube, namespace, after)
