"""The real thing: a kind cluster, the images built and loaded, the chart packaged and
`helm install`ed, a Broker and a Stream applied with kubectl, messages produced and consumed from
a pod, scaling, deleting; and a stream with three replicas whose leader's pod is deleted: a new
leader is elected and no confirmed message is lost.

Runs where docker, kind, helm and kubectl exist (a laptop, the e2e GitHub workflow); skips
elsewhere. It uses a kubeconfig of its own, so it never touches the user's clusters.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamlet_operator import names
from tests.e2e.checks import Consumed, Leadership, bodies, produce_script

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = os.environ.get("STREAMLET_E2E_CLUSTER", "streamlet-e2e")
TAG = "e2e"
NS = "streamlet-system"
APP = "apps"

pytestmark = [pytest.mark.timeout(1500), pytest.mark.process]


def _missing_tools() -> str | None:
    missing = [tool for tool in ("docker", "kind", "helm", "kubectl") if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} on PATH (a kind cluster): not available here"
    probe = subprocess.run(["docker", "info"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        return "needs a running Docker engine: `docker info` failed"
    return None


class Kind:
    def __init__(self, kubeconfig: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def run(self, *args: str, timeout: float = 600, input_: str | None = None) -> str:
        result = subprocess.run(list(args), env=self.env, capture_output=True, text=True,
                                timeout=timeout, input=input_, cwd=ROOT)
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result.stdout

    def kubectl(self, *args: str, **kw: Any) -> str:
        return self.run("kubectl", *args, **kw)

    def get(self, kind: str, name: str, ns: str = APP) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("-n", ns, "get", kind, name, "-o", "json")))

    def wait_for(self, what: str, check: Any, timeout: float = 300) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = check()
            except AssertionError as e:
                last = str(e)[-300:]
            else:
                if last:
                    return last
            time.sleep(3)
        raise AssertionError(f"{what} not reached in {timeout} s; last: {last!r}")

    def client_pod(self, name: str, *command: str) -> str:
        """Run a one-off pod with the broker image (it has the streamlet CLI); return its log."""
        self.kubectl("-n", APP, "run", name, f"--image=streamlet/broker:{TAG}",
                     "--image-pull-policy=Never", "--restart=Never", "--command", "--",
                     *command)
        self.wait_for(f"pod {name} done", lambda: self.get("pod", name)["status"].get(
            "phase") in ("Succeeded", "Failed"), timeout=180)
        log = self.kubectl("-n", APP, "logs", name)
        assert self.get("pod", name)["status"]["phase"] == "Succeeded", log
        self.kubectl("-n", APP, "delete", "pod", name, "--wait=false")
        return log


@pytest.fixture(scope="module")
def kind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kind]:
    reason = _missing_tools()
    if reason:
        pytest.skip(reason)
    k = Kind(tmp_path_factory.mktemp("kind") / "kubeconfig")
    k.run("kind", "create", "cluster", "--name", CLUSTER, "--kubeconfig", k.env["KUBECONFIG"],
          "--wait", "180s", timeout=600)
    try:
        for image, dockerfile in (("broker", "broker_image/Dockerfile"),
                                  ("operator", "operator/Dockerfile")):
            k.run("docker", "build", "-f", dockerfile, "-t", f"streamlet/{image}:{TAG}", ".",
                  timeout=1200)
            k.run("kind", "load", "docker-image", f"streamlet/{image}:{TAG}", "--name", CLUSTER)
        yield k
    finally:
        if not os.environ.get("STREAMLET_E2E_KEEP"):
            subprocess.run(["kind", "delete", "cluster", "--name", CLUSTER], timeout=300,
                           capture_output=True)


# Run in a client pod: ask the client Service (any pod) for the stream's leader until six
# answers in a row name the same one (the Service spreads connections over the pods; a pod
# not holding the stream answers from the directory ConfigMap, which the kubelet delivers
# within about a minute), then print it.
LOCATE = """
import asyncio, sys, time
from streamlet.client import connect

async def main() -> None:
    seen, deadline = [], time.monotonic() + 240
    while len(seen) < 6 or len(set(seen[-6:])) > 1:
        assert time.monotonic() < deadline, f"no stable leader: {seen[-6:]}"
        c = await connect(sys.argv[1], 5552, user="app", password="app-password")
        try:
            m = await c.metadata([sys.argv[2]])
        finally:
            await c.close()
        brokers = {b.reference: f"{b.host}:{b.port}" for b in m.brokers}
        s = m.streams[0]
        seen.append(brokers[s.leader] if s.code == 1 else "missing")
        await asyncio.sleep(1 if seen[-1] != "missing" else 5)
    print("leader=" + seen[-1])

asyncio.run(main())
"""


def _ready(obj: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


@pytest.fixture(scope="module")
def release(kind: Kind, tmp_path_factory: pytest.TempPathFactory) -> Kind:
    """The operator installed from the chart as `helm package` makes it (the CRDs its
    symlinks name, carried as files), and the namespace APP with its users Secret."""
    out = tmp_path_factory.mktemp("chart")
    kind.run("helm", "package", "charts/streamlet", "--destination", str(out))
    [archive] = out.glob("streamlet-*.tgz")
    kind.run("helm", "install", "streamlet", str(archive), "--namespace", NS,
             "--create-namespace", "--wait", "--timeout", "5m",
             "--set", "operator.image.repository=streamlet/operator",
             "--set", f"operator.image.tag={TAG}", "--set", "operator.image.pullPolicy=Never",
             "--set", "operator.brokerInterval=3", "--set", "operator.streamInterval=3")
    kind.kubectl("create", "namespace", APP)
    kind.kubectl("-n", APP, "create", "secret", "generic", "app-users",
                 "--from-literal=app=app-password")
    return kind


def test_install_stream_produce_consume_scale_delete(release: Kind) -> None:
    kind = release
    broker = f"""
apiVersion: streamlet.dev/v1alpha1
kind: Broker
metadata: {{name: streamlet}}
spec:
  replicas: 2
  image: streamlet/broker:{TAG}
  imagePullPolicy: Never
  usersSecret: app-users
  storage: {{size: 1Gi}}
"""
    kind.kubectl("-n", APP, "apply", "-f", "-", input_=broker)
    kind.wait_for("Broker ready", lambda: _ready(kind.get("broker", "streamlet")))

    stream = (ROOT / "examples" / "stream.yaml").read_text()
    kind.kubectl("-n", APP, "apply", "-f", "-", input_=stream)
    status = kind.wait_for("Stream ready", lambda: _ready(s := kind.get("stream", "orders"))
                           and s["status"])
    assert status["leader"] in ("streamlet-0", "streamlet-1")

    # Any pod, reached through the client Service, names the stream's pod (stream directory).
    leader = f"{status['leader']}.streamlet-headless.{APP}.svc.cluster.local"
    located = kind.client_pod("locate", "python", "-c", LOCATE, f"streamlet.{APP}.svc", "orders")
    assert f"leader={leader}:5552" in located
    # The streamlet CLI does not follow Metadata's leader (rstream and the Java client do):
    # give it the address the Service's answer named.
    auth = ["--host", leader, "--user", "app", "--password", "app-password"]
    kind.client_pod("producer", "streamlet", "produce", "orders", "--count", "1000", *auth)
    log = kind.client_pod("consumer", "streamlet", "consume", "orders", "--count", "1000",
                          "--timeout", "60", *auth)
    assert len([line for line in log.splitlines() if "\t" in line]) == 1000  # offset<TAB>body

    kind.kubectl("-n", APP, "patch", "broker", "streamlet", "--type", "merge",
                 "-p", '{"spec": {"replicas": 3}}')
    kind.wait_for("3 broker pods ready", lambda: kind.get("broker", "streamlet")["status"].get(
        "readyReplicas") == 3)

    kind.kubectl("-n", APP, "delete", "stream", "orders", "--timeout", "120s")
    # `streamlet streams` takes the connection options before its action.
    info = kind.client_pod("inspect", "streamlet", "streams", *auth, "info", "orders")
    assert "orders\tmissing" in info


HA, PAYMENTS = "ha", "payments"
#: messages published before the leader's pod is deleted, and as many after
BATCH = 2000


def _leadership(kind: Kind) -> Leadership | None:
    return Leadership.of(kind.get("stream", PAYMENTS))


def _located(kind: Kind, name: str, leader: int) -> None:
    """Every pod, through the client Service, names ``leader``'s pod for the stream (so the
    producer that asks next is sent there)."""
    located = kind.client_pod(name, "python", "-c", LOCATE, f"{HA}.{APP}.svc", PAYMENTS)
    assert f"leader={names.pod_dns(HA, leader, APP, 'cluster.local')}:5552" in located


def test_replicated_stream_loses_no_confirmed_message_with_its_leaders_pod(
        release: Kind) -> None:
    kind = release
    broker = f"""
apiVersion: streamlet.dev/v1alpha1
kind: Broker
metadata: {{name: {HA}}}
spec:
  replicas: 3
  image: streamlet/broker:{TAG}
  imagePullPolicy: Never
  usersSecret: app-users
  storage: {{size: 1Gi}}
"""
    kind.kubectl("-n", APP, "apply", "-f", "-", input_=broker)
    kind.wait_for("3 broker pods ready", lambda: kind.get("broker", HA)["status"].get(
        "readyReplicas") == 3, timeout=600)
    stream = f"""
apiVersion: streamlet.dev/v1alpha1
kind: Stream
metadata: {{name: {PAYMENTS}}}
spec:
  broker: {HA}
  replicas: 3
  retention: {{maxAge: 1D}}
  deletionPolicy: delete
"""
    kind.kubectl("-n", APP, "apply", "-f", "-", input_=stream)
    before: Leadership = kind.wait_for(
        "3 members in sync", lambda: (s := _leadership(kind)) is not None and s.settled(3) and s)
    assert before.leader is not None
    _located(kind, "ha-locate-before", before.leader)

    auth = ["--host", f"{HA}.{APP}.svc", "--user", "app", "--password", "app-password"]
    # the pod succeeds only once every message is confirmed
    kind.client_pod("ha-produce-before", "sh", "-c",
                    produce_script("before", BATCH, PAYMENTS, auth))

    old = names.pod(HA, before.leader)
    uid = kind.get("pod", old)["metadata"]["uid"]
    kind.kubectl("-n", APP, "delete", "pod", old, "--wait=false")
    after: Leadership = kind.wait_for(
        "a leader in a new epoch", lambda: (s := _leadership(kind)) is not None
        and s.after(before) and s, timeout=300)
    assert after.leader is not None
    kind.wait_for(f"{old} made again", lambda: kind.get("pod", old)["metadata"]["uid"] != uid)
    # the leadership may go back to its first pod once in sync again: ask where it is now
    now: Leadership = kind.wait_for(
        "3 members in sync again", lambda: (s := _leadership(kind)) is not None
        and s.settled(3) and s, timeout=300)
    assert now.leader is not None
    _located(kind, "ha-locate-after", now.leader)
    kind.client_pod("ha-produce-after", "sh", "-c",
                    produce_script("after", BATCH, PAYMENTS, auth))

    log = kind.client_pod("ha-consume", "streamlet", "consume", PAYMENTS, "--count",
                          str(2 * BATCH), "--timeout", "60", *auth)
    consumed = Consumed.parse(log)
    assert consumed.lost(bodies("before", BATCH) + bodies("after", BATCH)) == []
    assert consumed.duplicates() == [] and consumed.in_order()
    kind.kubectl("-n", APP, "delete", "stream", PAYMENTS, "--timeout", "120s")
