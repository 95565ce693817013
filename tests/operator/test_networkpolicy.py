"""A Broker's NetworkPolicy against the real operator and an emulated API server: made with
the Broker (owned by it, its rules from spec.networkPolicy), changed with the spec, deleted
when turned off, made again when turned back on."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from streamlet_operator.kube import Kube
from tests.operator.harness import eventually
from tests.operator.test_broker import broker_body

TEAM_A = {"matchLabels": {"team": "a"}}


async def test_broker_gets_its_networkpolicy_and_loses_it_when_turned_off(
        kube: Kube, namespace: str) -> None:
    await kube.create(broker_body(namespace, port=5600, tls={"secretName": "b-tls"}))
    policy = await eventually(lambda: kube.get("NetworkPolicy", namespace, "b"),
                              what="NetworkPolicy")
    kubernetes_validate.validate(policy, "1.33", strict=False)
    broker = await kube.get("Broker", namespace, "b")
    assert broker is not None
    owner = policy["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Broker", broker["metadata"]["uid"])
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "b"
    clients, own, metrics, management = spec["ingress"]
    assert [p["port"] for p in clients["ports"]] == [5600, 5551] and "from" not in clients
    assert own["from"][0] == {"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "streamlet-broker", "app.kubernetes.io/instance": "b"}}}
    assert [p["port"] for p in metrics["ports"]] == [15692, 15691]  # HTTP and HTTPS
    assert [p["port"] for p in management["ports"]] == [15672, 15671]  # HTTP and HTTPS
    assert management["from"] == [{"podSelector": {}}]

    await kube.patch("Broker", namespace, "b", {"spec": {"networkPolicy": {
        "clientNamespaces": TEAM_A}}})

    async def selected() -> Any:
        found = await kube.get("NetworkPolicy", namespace, "b")
        rule = found and found["spec"]["ingress"][0]
        return rule if rule and rule.get("from") == [{"namespaceSelector": TEAM_A}] else None

    await eventually(selected, what="clients from the selected namespaces")

    await kube.patch("Broker", namespace, "b", {"spec": {"networkPolicy": {"enabled": False}}})

    async def gone() -> bool:
        return await kube.get("NetworkPolicy", namespace, "b") is None

    await eventually(gone, what="NetworkPolicy deleted")
    # the rest of the Broker stays
    assert await kube.get("Service", namespace, "b") is not None

    await kube.patch("Broker", namespace, "b", {"spec": {"networkPolicy": {"enabled": True}}})
    await eventually(lambda: kube.get("NetworkPolicy", namespace, "b"), what="made again")


async def test_turned_off_leaves_a_policy_it_did_not_make(kube: Kube, namespace: str) -> None:
    mine = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "b", "namespace": namespace},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    await kube.create(mine)
    await kube.create(broker_body(namespace, networkPolicy={"enabled": False}))

    async def reconciled() -> Any:
        b = await kube.get("Broker", namespace, "b")
        return b if (b or {}).get("status", {}).get("observedGeneration") else None

    await eventually(reconciled, what="Broker reconciled")
    kept = await kube.get("NetworkPolicy", namespace, "b")
    assert kept is not None and kept["spec"]["podSelector"] == {}
