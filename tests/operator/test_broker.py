"""Broker resources against the real operator and an emulated API server."""

from __future__ import annotations

import base64
import tomllib
from typing import Any

import pytest

from streamlet_operator import names
from streamlet_operator.kube import Kube
from streamlet_operator.runtime import operator_password
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet


def broker_body(namespace: str, name: str = "b", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return {}


async def test_broker_creates_its_children(kube: Kube, namespace: str) -> None:
    await kube.create(broker_body(namespace, replicas=2, port=5600,
                                  retention={"maxAge": "3D", "maxLengthBytes": 1000}))
    sts = await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
    broker = await kube.get("Broker", namespace, "b")
    assert broker is not None
    owner = sts["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Broker", "b", broker["metadata"]["uid"])
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["serviceName"] == "b-headless"
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
    assert container["livenessProbe"]["tcpSocket"]["port"] == "stream"
    assert container["ports"][0]["containerPort"] == 5600
    assert "preStop" in container["lifecycle"]
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "512Mi"}}  # defaults
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"

    cm = await eventually(lambda: kube.get("ConfigMap", namespace, "b-config"))
    config = tomllib.loads(cm["data"][names.CONFIG_KEY])
    assert config["server"]["port"] == 5600
    assert config["retention"] == {"max_age": "3D", "max_length_bytes": 1000,
                                   "max_segment_size_bytes": 500_000_000}
    headless = await kube.get("Service", namespace, "b-headless")
    assert headless is not None and headless["spec"]["clusterIP"] == "None"
    client_svc = await kube.get("Service", namespace, "b")
    assert client_svc is not None and client_svc["spec"]["ports"][0]["port"] == 5600
    pdb = await eventually(lambda: kube.get("PodDisruptionBudget", namespace, "b"))
    assert pdb["spec"]["maxUnavailable"] == 1
    users = await eventually(lambda: kube.get("Secret", namespace, "b-users"))
    users_toml = tomllib.loads(base64.b64decode(users["data"][names.USERS_KEY]).decode())
    assert [u["name"] for u in users_toml["users"]] == ["guest"]  # the test's operator user


@pytest.mark.process
async def test_broker_status_follows_pods(kube: Kube, kubelet: Kubelet, namespace: str) -> None:
    await kube.create(broker_body(namespace, replicas=2))
    created = await eventually(lambda: kube.get("Broker", namespace, "b"))
    generation = created["metadata"]["generation"]

    async def progressing() -> Any:
        b = await kube.get("Broker", namespace, "b")
        return b if condition(b, "Ready").get("status") == "False" else None

    b = await eventually(progressing, what="Ready=False before pods run")
    assert b["status"]["phase"] == "Progressing"
    assert b["status"]["observedGeneration"] == generation
    assert b["status"]["endpoints"] == [f"b-{i}.b-headless.{namespace}.svc:5552" for i in (0, 1)]

    await kubelet.sync(namespace, "b")

    async def ready() -> Any:
        b = await kube.get("Broker", namespace, "b")
        return b if condition(b, "Ready").get("status") == "True" else None

    b = await eventually(ready, what="Ready=True once pods run")
    assert b["status"]["readyReplicas"] == 2 and b["status"]["phase"] == "Ready"


async def test_broker_update_rolls_out(kube: Kube, namespace: str) -> None:
    await kube.create(broker_body(namespace, replicas=1))
    await eventually(lambda: kube.get("StatefulSet", namespace, "b"))
    await kube.patch("Broker", namespace, "b", {"spec": {"replicas": 3, "image": "x/broker:2"}})

    async def scaled() -> Any:
        sts = await kube.get("StatefulSet", namespace, "b")
        return sts if sts and sts["spec"]["replicas"] == 3 else None

    sts = await eventually(scaled, what="StatefulSet scaled to 3")
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == "x/broker:2"

    async def observed() -> Any:
        b = await kube.get("Broker", namespace, "b")
        return b if b and (b.get("status") or {}).get("observedGeneration") == 2 else None

    await eventually(observed, what="observedGeneration 2")


async def test_broker_repairs_a_deleted_child(kube: Kube, namespace: str) -> None:
    await kube.create(broker_body(namespace))
    await eventually(lambda: kube.get("Service", namespace, "b"))
    assert await kube.delete("Service", namespace, "b")
    await eventually(lambda: kube.get("Service", namespace, "b"), what="client Service re-made")


async def test_users_secret_adds_users(kube: Kube, namespace: str) -> None:
    await kube.create({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": "app-users", "namespace": namespace},
                       "data": {"app": base64.b64encode(b"s3cret").decode()}})
    await kube.create(broker_body(namespace, usersSecret="app-users"))

    async def users() -> Any:
        s = await kube.get("Secret", namespace, "b-users")
        if s is None:
            return None
        doc = tomllib.loads(base64.b64decode(s["data"][names.USERS_KEY]).decode())
        return {u["name"]: u["password"] for u in doc["users"]}

    assert await eventually(users) == {"app": "s3cret", "guest": "guest"}

    async def configured() -> Any:
        return condition(await kube.get("Broker", namespace, "b"), "UsersConfigured")

    assert (await eventually(configured))["status"] == "True"


async def test_missing_users_secret_is_a_condition(kube: Kube, namespace: str) -> None:
    await kube.create(broker_body(namespace, usersSecret="nope"))

    async def configured() -> Any:
        return condition(await kube.get("Broker", namespace, "b"), "UsersConfigured")

    cond = await eventually(configured)
    assert (cond["status"], cond["reason"]) == ("False", "UsersSecretNotFound")
    assert "'nope' not found" in cond["message"]


async def test_every_object_made_for_a_broker_is_owned_by_it(kube: Kube, namespace: str) -> None:
    """Deleting the Broker lets the garbage collector remove them (the volumes excepted: the
    StatefulSet's claims are kept, whenDeleted: Retain)."""
    await kube.create(broker_body(namespace))
    await eventually(lambda: kube.get("PodDisruptionBudget", namespace, "b"), what="children")
    broker = await kube.get("Broker", namespace, "b")
    assert broker is not None
    # The test's operator logs in as guest: its password Secret is made here, as in a cluster.
    await operator_password(kube, namespace, "b")
    made = [obj for kind in ("ConfigMap", "Secret", "Service", "StatefulSet",
                             "PodDisruptionBudget")
            for obj in await kube.list(kind, namespace, labels=names.selector("b"))]
    assert {o["metadata"]["name"] for o in made} >= {
        "b", "b-headless", "b-config", "b-users", names.operator_secret("b")}
    for obj in made:
        owners = obj["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["uid"]) for o in owners] == [("Broker", broker["metadata"]["uid"])], (
            obj["kind"], obj["metadata"]["name"])


async def test_an_operator_secret_without_an_owner_is_adopted(kube: Kube, namespace: str) -> None:
    await kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": names.operator_secret("b"), "namespace": namespace},
        "data": {"password": base64.b64encode(b"kept").decode()}})
    await kube.create(broker_body(namespace))
    broker = await eventually(lambda: kube.get("Broker", namespace, "b"))
    assert await operator_password(kube, namespace, "b") == "kept"
    secret = await kube.get("Secret", namespace, names.operator_secret("b"))
    assert secret is not None
    assert [o["uid"] for o in secret["metadata"]["ownerReferences"]] == [broker["metadata"]["uid"]]


async def test_spec_logging_goes_to_the_brokers_command(kube: Kube, namespace: str) -> None:
    await kube.create(broker_body(namespace, logging={"level": "warning", "json": True}))
    sts = await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
    command = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-4:] == ["--log-level", "WARNING", "--log-format", "json"]
    await kube.patch("Broker", namespace, "b", {"spec": {"logging": None}})

    async def plain() -> Any:
        found = await kube.get("StatefulSet", namespace, "b")
        command = found["spec"]["template"]["spec"]["containers"][0]["command"] if found else []
        return found if "--log-level" not in command and "--log-format" not in command else None
    await eventually(plain, what="the flags gone with spec.logging")
