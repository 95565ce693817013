"""Two operator replicas, each a real process (tests/operator/peering_main.py: the production
options, kopf peering) against one emulated API server: only the replica that started first
acts on the Brokers while both run, the other waits; stopped, the first hands over to the
second. Once with a ClusterKopfPeering (watching every namespace, the chart's default), once
with a KopfPeering in the watched namespace (rbac.scope=namespace)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest

from streamlet_operator.kube import Kube
from tests.chart.conftest import ROOT
from tests.operator.harness import VERBS, EmulatedApiServer, eventually, kube_client
from tests.support.brokers import free_port
from tests.support.scrape import scrape, value

pytestmark = pytest.mark.process

NAMESPACE = "peering"
PEERING = "streamlet-operator"
# Generous: two operator processes start on a loaded machine with 2 cores.
STARTUP = 120.0


@pytest.fixture
def api() -> Iterator[EmulatedApiServer]:
    """An API server of its own: the package's shared operator must not act here too."""
    server = EmulatedApiServer().start()
    assert server.emulator is not None
    # kopf's peering resources, as charts/streamlet/crds/kopf.dev_peerings.yaml declares them
    # (no status subresource: kopf patches the status through the object).
    server.emulator.resources["kopf.dev/v1/clusterkopfpeerings"] = kmock.ResourceInfo(
        kind="ClusterKopfPeering", singular="clusterkopfpeering", namespaced=False, verbs=VERBS)
    server.emulator.resources["kopf.dev/v1/kopfpeerings"] = kmock.ResourceInfo(
        kind="KopfPeering", singular="kopfpeering", namespaced=True, verbs=VERBS)
    yield server
    server.stop()


@pytest.fixture
async def kube(api: EmulatedApiServer) -> AsyncIterator[Kube]:
    client = kube_client(api.url)
    yield client
    await client.close()


@dataclass
class Replica:
    """One operator process, its log in a file, its metrics on a port of its own."""

    name: str
    api: str
    options: list[str]
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0

    def start(self) -> Replica:
        env = {**os.environ, "POD_ID": self.name, "PYTHONPATH": str(ROOT)}
        self.started = time.time()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.operator.peering_main", "--api", self.api,
                 "--metrics-port", str(self.port), *self.options],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        return self

    def stop(self) -> None:
        """SIGTERM, as the kubelet stops a pod: kopf leaves the peering on its way out."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    async def broker_reconciliations(self) -> float | None:
        """Broker reconciliations this replica ran (None: its metrics do not answer yet)."""
        assert self.proc is not None
        assert self.proc.poll() is None, f"{self.name} exited:\n{self.log.read_text()[-3000:]}"
        try:
            samples = await scrape(self.port)
        except OSError:
            return None
        return sum(value(samples, "streamlet_operator_reconciliations_total",
                         kind="Broker", handler=h) or 0.0 for h in ("change", "timer"))


def _broker(name: str) -> dict[str, Any]:
    return {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": 1, "image": "ghcr.io/streamlet/broker:0.1.0"}}


def _peering_url(api: str, clusterwide: bool) -> str:
    if clusterwide:
        return f"{api}/apis/kopf.dev/v1/clusterkopfpeerings/{PEERING}"
    return f"{api}/apis/kopf.dev/v1/namespaces/{NAMESPACE}/kopfpeerings/{PEERING}"


async def _peers(api: str, clusterwide: bool) -> set[str]:
    """The replicas that wrote a keep-alive in the peering object (kopf's status: one entry
    per replica, by its id, POD_ID here)."""
    async with aiohttp.ClientSession() as http, http.get(_peering_url(api, clusterwide)) as rsp:
        assert rsp.status == 200, await rsp.text()
        obj = await rsp.json()
    return set(obj.get("status") or {})


async def _has_statefulset(kube: Kube, name: str) -> bool:
    return await kube.get("StatefulSet", NAMESPACE, name) is not None


@pytest.mark.parametrize("clusterwide", [True, False], ids=["cluster", "namespace"])
async def test_one_replica_acts_and_the_other_takes_over(
        api: EmulatedApiServer, kube: Kube, tmp_path: Path, clusterwide: bool) -> None:
    peering = _peering_url(api.url, clusterwide)
    async with aiohttp.ClientSession() as http:
        kind = "ClusterKopfPeering" if clusterwide else "KopfPeering"
        async with http.post(peering.rsplit("/", 1)[0], json={
                "apiVersion": "kopf.dev/v1", "kind": kind, "metadata": {"name": PEERING}}) as rsp:
            assert rsp.status < 300, await rsp.text()
    options = ["--peering", PEERING] + ([] if clusterwide else ["--namespace", NAMESPACE])
    await kube.create(_broker("first"))

    first = Replica("operator-a", api.url, options, tmp_path / "a.log")
    second = Replica("operator-b", api.url, options, tmp_path / "b.log")
    try:
        first.start()
        await eventually(lambda: _has_statefulset(kube, "first"), timeout=STARTUP,
                         what="the first replica made the first Broker's StatefulSet")
        await eventually(first.broker_reconciliations, timeout=STARTUP,
                         what="the first replica's metrics count its reconciliations")
        # Priorities follow the start time by the second: start the second replica a second
        # later at least (the first one took longer than that to start anyway).
        await eventually(lambda: int(time.time()) > int(first.started), timeout=5,
                         what="a second after the first replica started")
        second.start()
        await eventually(lambda: _grew(second, 0), timeout=STARTUP,
                         what="the second replica's metrics answer")
        await eventually(lambda: _both(api.url, clusterwide), timeout=STARTUP,
                         what="both replicas' keep-alives in the peering object")

        # Both run: a new Broker is made by the first alone; the second reconciles nothing
        # while the first's timers go on reconciling (interval 1 s) for several rounds.
        await kube.create(_broker("second"))
        await eventually(lambda: _has_statefulset(kube, "second"), timeout=STARTUP,
                         what="the second Broker's StatefulSet")
        before = await first.broker_reconciliations()
        assert before is not None
        await eventually(lambda: _grew(first, before + 6), timeout=STARTUP,
                         what="the first replica reconciling on")
        assert await second.broker_reconciliations() == 0, "the waiting replica acted"

        # The first stops (SIGTERM): the second takes over, resumes both Brokers and makes a
        # third's children.
        first.stop()
        await eventually(lambda: _grew(second, 1), timeout=STARTUP,
                         what="the second replica reconciling after the first stopped")
        await kube.create(_broker("third"))
        await eventually(lambda: _has_statefulset(kube, "third"), timeout=STARTUP,
                         what="the second replica made the third Broker's StatefulSet")
        assert await _peers(api.url, clusterwide) == {"operator-b"}
    finally:
        first.stop()
        second.stop()
    # kopf starts a peered replica paused and said when the second one resumed
    log_b = (tmp_path / "b.log").read_text()
    assert "Resuming operations after the pause" in log_b, log_b[-3000:]


async def _both(api: str, clusterwide: bool) -> bool:
    return await _peers(api, clusterwide) == {"operator-a", "operator-b"}


async def _grew(replica: Replica, at_least: float) -> bool:
    count = await replica.broker_reconciliations()
    return count is not None and count >= at_least
