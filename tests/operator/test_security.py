"""Authorization and TLS with the real operator: a Broker with permissions, TLS only and mutual
TLS comes up from what the operator rendered, the operator creates a Stream over TLS with its
client certificate, a restricted user reads but cannot write, and an export's own user reads
its stream only. Neither users nor permissions changes roll the pods (both are in the users
Secret, which the broker reloads); a vhost change does (the config, read at start).

The "pod" here is a real broker started from the operator's own ConfigMap, users Secret and
TLS Secret (the paths and ports moved to this machine), which tests/operator/kubelet.py's
launcher does not do: it runs brokers with a minimal config of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.client.tls import client_context
from streamlet.cluster.tomlwrite import dumps
from streamlet_operator import names
from streamlet_operator.brokers import Address
from streamlet_operator.builders.statefulset import TEMPLATE_HASH
from streamlet_operator.driver import Driver
from streamlet_operator.kube import Kube
from streamlet_operator.model import BrokerModel
from streamlet_operator.runtime import Runtime
from tests.operator.conftest import Cluster, _guest
from tests.operator.harness import eventually
from tests.operator.kubelet import Kubelet
from tests.operator.test_broker import broker_body, condition
from tests.operator.test_stream import stream_body
from tests.support.brokers import BrokerProcess, free_port
from tests.support.certs import make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One CA (what cert-manager's CA Issuer does): the brokers' certificate (127.0.0.1, as
    the test's pods are reached), the operator's client certificate and a reader's."""
    return make_certs(tmp_path_factory.mktemp("certs"), clients=("operator", "reader"))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _tls_secret(namespace: str, name: str, d: Path, which: str) -> dict[str, Any]:
    """A kubernetes.io/tls Secret as cert-manager writes it: tls.crt, tls.key and ca.crt."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"tls.crt": _b64((d / f"{which}.crt").read_text()),
                     "tls.key": _b64((d / f"{which}.key").read_text()),
                     "ca.crt": _b64((d / "ca.crt").read_text())}}


def _users_secret(namespace: str, users: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "app-users", "namespace": namespace},
            "data": {u: _b64(p) for u, p in users.items()}}


class ConfigPod:
    """Runs pod 0 of a Broker from what the operator rendered, as the kubelet would mount it;
    tests/operator/kubelet.py's Kubelet asks it for the pod (Launcher)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: BrokerProcess | None = None
        self.config: dict[str, Any] = {}

    async def prepare(self, kube: Kube, namespace: str, broker: str) -> None:
        cm = await eventually(lambda: kube.get("ConfigMap", namespace, names.configmap(broker)),
                              what="ConfigMap")
        users = await eventually(lambda: kube.get("Secret", namespace, names.users_secret(broker)),
                                 what="users Secret")
        doc = tomllib.loads(cm["data"][names.CONFIG_KEY])
        files = self.root / "etc"
        files.mkdir(parents=True, exist_ok=True)
        (files / "users.toml").write_bytes(base64.b64decode(users["data"][names.USERS_KEY]))
        doc["server"].update(host="127.0.0.1", data_dir=str(self.root / "data"),
                             users_file=str(files / "users.toml"))
        doc["cluster"] = {"directory_file": str(files / "streams.json")}  # one pod: no peers
        #: what the operator rendered for the management API (its HTTPS port moved here)
        self.http = dict(doc.get("listeners", {}).get("http", {}))
        self.https_port = free_port()
        doc["listeners"] = {**doc.get("listeners", {}), "metrics": {"enabled": False},
                            "http": ({"tls_port": self.https_port} if "tls_port" in self.http
                                     else {"enabled": False})}
        if "tls" in doc:
            secret = await kube.get("Secret", namespace, f"{broker}-tls")
            assert secret is not None
            for key, path_key in (("tls.crt", "certfile"), ("tls.key", "keyfile"),
                                  ("ca.crt", "cafile")):
                if path_key in doc["tls"]:  # the mounted Secret's files, where the config says
                    assert doc["tls"][path_key].endswith("/" + key)
                    (files / key).write_bytes(base64.b64decode(secret["data"][key]))
                    doc["tls"][path_key] = str(files / key)
            doc["tls"]["port"] = free_port()
        self.config = doc

    def start(self, namespace: str, broker: str, ordinal: int) -> Address:
        doc = self.config
        path = self.root / "streamlet.toml"
        path.write_text(dumps(doc))
        tls_only = not doc.get("listeners", {}).get("rabbitmq", {}).get("enabled", True)
        # TLS only: --port is the TLS port too (no plain listener takes it); it is waited on
        port = doc["tls"]["port"] if tls_only else free_port()
        self.proc = BrokerProcess(self.root / "data", port=port, config=path).start()
        return self.proc.host, port

    def stop(self, address: Address) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def directory_file(self, namespace: str, broker: str) -> Path:
        return self.root / "etc" / "streams.json"


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[ConfigPod]:
    pod = ConfigPod(tmp_path / "pod")
    try:
        yield pod
    finally:
        pod.stop(("", 0))


def _https_get(port: int, path: str, ca: Path, user: str, password: str) -> Any:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(req, timeout=10,
                                context=ssl.create_default_context(cafile=str(ca))) as resp:
        return json.loads(resp.read())


async def _template_hash(kube: Kube, namespace: str) -> str:
    sts = await eventually(lambda: kube.get("StatefulSet", namespace, "b"), what="StatefulSet")
    return str(sts["spec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH])


@pytest.mark.process
async def test_mtls_only_broker_with_permissions_and_an_export_user(
        cluster: Cluster, kube: Kube, namespace: str, certs: Path, pod: ConfigPod) -> None:
    await kube.create(_tls_secret(namespace, "b-tls", certs, "server"))
    await kube.create(_tls_secret(namespace, "b-operator-client", certs, "operator"))
    await kube.create(_users_secret(namespace, {"reader": "reader-pw"}))
    await kube.create(broker_body(
        namespace, usersSecret="app-users",
        tls={"secretName": "b-tls", "verifyPeer": True, "plainListener": False,
             "operatorClientSecret": "b-operator-client"},
        permissions=[{"user": "reader", "configure": "", "write": "", "read": ".*"}]))
    # An export on a Stream made before the pod runs: its user is in the pod's first config.
    # verifyPeer: the export needs a client certificate of its own (else ExportInvalid).
    await kube.create(stream_body(namespace, "events", export={
        "schedule": "0 * * * *", "destination": "s3a://lake/events",
        "tlsClientSecret": "events-export-client"}))
    secret = await eventually(lambda: kube.get("Secret", namespace, "events-export-user"),
                              what="the export user's Secret")
    export_password = base64.b64decode(secret["data"]["password"]).decode()

    async def export_user_configured() -> bool:
        users = await kube.get("Secret", namespace, "b-users") or {}
        users_text = base64.b64decode((users.get("data") or {}).get(names.USERS_KEY, "")).decode()
        # its password and its read-only permission, together in the file the broker reloads
        return (export_password in users_text
                and 'user = "streamlet-export-events"' in users_text)

    await eventually(export_user_configured, timeout=60, what="the export user in the users Secret")
    config_text = await _config_text(kube, namespace)
    assert "[[permissions]]" not in config_text, "permissions are in the users Secret only"
    await pod.prepare(kube, namespace, "b")
    assert pod.config["listeners"]["rabbitmq"] == {"enabled": False}
    assert pod.config["tls"]["verify_peer"] is True
    kubelet = Kubelet(kube, cluster.pods, pod)
    await kubelet.sync(namespace, "b")
    host, port = cluster.pods.pods[(namespace, "b", 0)]
    try:
        # The operator reaches the pod over TLS only, with its client certificate: it creates
        # the stream, and writes to it (a copy would too) as the unrestricted operator user.
        await eventually(lambda: _stream_ready(kube, namespace), timeout=60,
                         what="the Stream created over TLS")
        broker = await kube.get("Broker", namespace, "b")
        assert condition(broker, "AccessConfigured")["status"] == "True"
        assert broker is not None and broker["status"]["clientService"].endswith(":5551")

        # The placement driver reaches the pods as the operator's other sessions do (TLS, the
        # operator's certificate, the TLS port), and names leaders to followers by the TLS
        # port: the brokers replicate over TLS.
        ports: list[int] = []

        def resolve(ns: str, name: str, ordinal: int, p: int) -> Address:
            ports.append(p)
            return cluster.pods(ns, name, ordinal, p)

        runtime = Runtime(kube=kube, admin=cluster.admin, resolve=resolve, credentials=_guest)
        members = await Driver(runtime, namespace, "b")._members(BrokerModel.from_body(broker))
        assert members.tls is not None and await members.probe(0)
        members.peer_address(0)
        assert set(ports) == {5551}

        reader = client_context(certs / "ca.crt", certs / "reader.crt", certs / "reader.key")
        with pytest.raises(Exception):  # noqa: B017 - a TLS alert or a reset: no certificate
            c = await connect(host, port, user="reader", password="reader-pw",
                              ssl=client_context(certs / "ca.crt"), timeout=10)
            await c.close()
        async with await connect(host, port, user="reader", password="reader-pw", ssl=reader,
                                 timeout=10) as c:
            await c.stream_stats("events")  # read: allowed
            with pytest.raises(Exception, match="ACCESS_REFUSED"):
                await c.producer("events")  # write: refused
            with pytest.raises(Exception, match="ACCESS_REFUSED"):
                await c.create_stream("other")  # configure: refused
        async with await connect(host, port, ssl=reader, mechanism="EXTERNAL",
                                 timeout=10) as c:  # the certificate's CN is the user
            with pytest.raises(Exception, match="ACCESS_REFUSED"):
                await c.producer("events")

        # The management API: HTTPS only on a TLS-only Broker, with the brokers' certificate
        # and no client certificate asked for (verifyPeer is the stream port's); Basic login.
        assert pod.http == {"tls_port": 15671}
        overview = await asyncio.to_thread(_https_get, pod.https_port, "/api/overview",
                                           certs / "ca.crt", "reader", "reader-pw")
        assert ("https", pod.https_port) in {(x["protocol"], x["port"])
                                            for x in overview["listeners"]}

        # The operator's user may do anything: a stream the export user must not read.
        async with await connect(host, port, user="guest", password="guest", timeout=10,
                                 ssl=client_context(certs / "ca.crt", certs / "operator.crt",
                                                    certs / "operator.key")) as c:
            await c.create_stream("events-private")
        async with await connect(host, port, user="streamlet-export-events",
                                 password=export_password, ssl=reader, timeout=10) as c:
            await c.stream_stats("events")
            consumer = await c.consumer("events", name="export-events")
            await consumer.close()
            with pytest.raises(Exception, match="ACCESS_REFUSED"):
                await c.stream_stats("events-private")
            with pytest.raises(Exception, match="ACCESS_REFUSED"):
                await c.producer("events")

        # The export goes: so do its Secret, its user and its permission, from the users
        # Secret only: the config is unchanged, so the pods do not roll.
        before = await _template_hash(kube, namespace)
        await kube.patch("Stream", namespace, "events", {"spec": {"export": None}})
        await eventually(lambda: _missing(kube, "Secret", namespace, "events-export-user"),
                         timeout=60, what="the export user's Secret deleted")

        async def user_gone() -> bool:
            users = await kube.get("Secret", namespace, "b-users") or {}
            return "streamlet-export-events" not in base64.b64decode(
                users["data"][names.USERS_KEY]).decode()

        await eventually(user_gone, timeout=60, what="the export user out of the users Secret")
        # the ConfigMap is applied before the users Secret in a pass, and the pod template's
        # config hash is the config's: the same config, the same template
        assert await _config_text(kube, namespace) == config_text
        assert await _template_hash(kube, namespace) == before, "a permission change rolled the pods"
        # Deleted while its pod runs: the finalizer deletes it on the broker, over TLS too.
        await kube.delete("Stream", namespace, "events")
        await eventually(lambda: _missing(kube, "Stream", namespace, "events"), timeout=60,
                         what="the Stream finalized")
    finally:
        kubelet.kill(namespace, "b", 0)


async def _missing(kube: Kube, kind: str, namespace: str, name: str) -> bool:
    return await kube.get(kind, namespace, name) is None


async def _stream_ready(kube: Kube, namespace: str) -> bool:
    cond = condition(await kube.get("Stream", namespace, "events"), "Ready")
    return (cond.get("status"), cond.get("reason")) == ("True", "StreamReady")


async def _hash_differs(kube: Kube, namespace: str, before: str) -> bool:
    return await _template_hash(kube, namespace) != before


async def _config_text(kube: Kube, namespace: str) -> str:
    cm = await kube.get("ConfigMap", namespace, "b-config") or {}
    return str((cm.get("data") or {}).get(names.CONFIG_KEY, ""))


async def test_neither_a_users_nor_a_permissions_change_rolls_the_pods_a_vhost_change_does(
        kube: Kube, namespace: str) -> None:
    await kube.create(_users_secret(namespace, {"app": "one"}))
    await kube.create(broker_body(namespace, usersSecret="app-users"))

    async def users_text() -> str:
        users = await kube.get("Secret", namespace, "b-users") or {}
        return base64.b64decode((users.get("data") or {}).get(names.USERS_KEY, "")).decode()

    await eventually(lambda: _contains(users_text, '"one"'), what="the users Secret")
    before = await _template_hash(kube, namespace)
    await kube.patch("Secret", namespace, "app-users",
                     {"data": {"app": _b64("two"), "other": _b64("three")}})
    await eventually(lambda: _contains(users_text, '"three"'), timeout=60,
                     what="the new users in the broker's users Secret")
    assert '"one"' not in await users_text()
    assert await _template_hash(kube, namespace) == before, "a users change rolled the pods"

    # A permission naming a user no Secret defines, and a bad regex: a condition, and a users
    # file the broker takes (and reloads: no roll).
    config_text = await _config_text(kube, namespace)
    await kube.patch("Broker", namespace, "b", {"spec": {"permissions": [
        {"user": "app", "read": "(unclosed"}, {"user": "ghost", "write": ""}]}})

    async def access_problem() -> dict[str, Any] | None:
        cond = condition(await kube.get("Broker", namespace, "b"), "AccessConfigured")
        return cond if cond.get("status") == "False" else None

    cond = await eventually(access_problem, timeout=60, what="AccessConfigured False")
    assert "(unclosed" in cond["message"] and "denies everything" in cond["message"]
    assert cond["reason"] == "InvalidPermissions"
    await eventually(lambda: _contains(users_text, '"ghost"'), timeout=60,
                     what="the permission's user defined (no usable password)")
    text = await users_text()
    assert '[[permissions]]\nuser = "app"\nvhost = "/"\nconfigure = ".*"\nwrite = ".*"\nread = ""' in text
    # the ConfigMap is applied before the users Secret: this pass's config is the old one
    assert await _config_text(kube, namespace) == config_text
    assert await _template_hash(kube, namespace) == before, "a permissions change rolled the pods"

    # A vhost: in the config, read at start, so it rolls the pods.
    await kube.patch("Broker", namespace, "b", {"spec": {"vhosts": ["team-a"]}})
    await eventually(lambda: _hash_differs(kube, namespace, before), timeout=60,
                     what="the vhost in the pod template")
    assert 'name = "team-a"' in await _config_text(kube, namespace)


async def _contains(text: Any, part: str) -> bool:
    return part in await text()
