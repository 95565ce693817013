"""The test plays the StatefulSet controller with ``updateStrategy: OnDelete`` and the kubelet,
for one Broker: a Pod per ordinal made from the StatefulSet's template as it is then, its broker
process started, and its Ready condition kept as the template's readinessProbe answers (httpGet
on the metrics port: the broker's /ready; tcpSocket: a connect); a deleted Pod keeps its broker for
``grace`` seconds (the preStop sleep), then has it stopped, and is made again ``restart_delay``
seconds after it is gone. A Pod whose template names an image of ``bad_images`` runs no
broker and stays not Ready (ImagePullBackOff), as the kubelet leaves a pod it cannot pull.

It records each deletion seen (with what ``on_delete`` says then) and the most pods down at
once in the API server's order (resourceVersions), which no sluggishness of this loop can hide.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from streamlet_operator import names
from streamlet_operator.kube import ApiError, Kube
from tests.operator.harness import PodAddresses
from tests.operator.peers import PeeredLauncher

FINALIZER = "tests.streamlet.dev/terminating"
log = logging.getLogger(__name__)


@dataclass
class Deletion:
    ordinal: int
    revision: str | None  # the template hash the deleted pod carried
    seen: Any  # what on_delete answered when the deletion was seen
    rv: int  # the resourceVersion of the write that marked it deleted


@dataclass
class StatefulSetController:
    kube: Kube
    pods: PodAddresses
    launcher: PeeredLauncher
    namespace: str
    name: str
    #: called with the ordinal when a pod's deletion is seen, before its broker stops
    on_delete: Callable[[int], Awaitable[Any]] | None = None
    deletions: list[Deletion] = field(default_factory=list)
    #: (resourceVersion, ordinal) of each Pod made
    made: list[tuple[int, int]] = field(default_factory=list)
    #: seconds a Terminating pod's broker keeps running (the preStop sleep)
    grace: float = 2.0
    #: seconds between a pod gone and its broker starting again (scheduling, pulling)
    restart_delay: float = 2.0
    #: images no pod starts from: its Pod is made, never Ready, and runs no broker
    bad_images: frozenset[str] = frozenset()
    #: seconds between two rounds of readiness probes
    probe_every: float = 0.5
    #: each Pod's Ready as last written, by ordinal
    ready: dict[int, bool] = field(default_factory=dict)
    _probed_at: float = 0.0
    _since: dict[int, float] = field(default_factory=dict)
    _gone: dict[int, float] = field(default_factory=dict)

    def _key(self, ordinal: int) -> tuple[str, str, int]:
        return (self.namespace, self.name, ordinal)

    async def step(self) -> None:
        sts = await self.kube.get("StatefulSet", self.namespace, self.name)
        if sts is None:
            return
        replicas = int(sts["spec"]["replicas"])
        template = sts["spec"]["template"]
        listed = {p["metadata"]["name"]: p for p in await self.kube.list(
            "Pod", self.namespace, labels=names.selector(self.name))}
        for ordinal in range(replicas):
            pod = listed.get(names.pod(self.name, ordinal))
            if pod is not None and pod["metadata"].get("deletionTimestamp"):
                await self._terminate(ordinal, pod)
            elif pod is None and time.monotonic() - self._gone.get(
                    ordinal, 0.0) >= self.restart_delay:
                await self._make(ordinal, template)
        if time.monotonic() - self._probed_at >= self.probe_every:
            self._probed_at = time.monotonic()
            await self._probe(listed)

    async def _probe(self, listed: dict[str, dict[str, Any]]) -> None:
        """The kubelet's readiness probes: each Pod running a broker, by its own template's
        readinessProbe; its Ready condition written when the answer changes."""
        for pod in listed.values():
            ordinal = int(pod["metadata"]["name"].rsplit("-", 1)[1])
            address = self.pods.pods.get(self._key(ordinal))
            if pod["metadata"].get("deletionTimestamp") or address is None:
                continue
            containers = (pod.get("spec") or {}).get("containers") or [{}]
            probe = containers[0].get("readinessProbe") or {}
            if "httpGet" in probe:
                assert probe["httpGet"]["port"] == "metrics", probe
                port = self.launcher.metrics_port(self.namespace, self.name, ordinal)
                ok = await asyncio.to_thread(_http_ok, address[0], port,
                                             probe["httpGet"].get("path", "/"))
            else:
                ok = await asyncio.to_thread(_tcp_ok, address)
            if self.ready.get(ordinal) != ok:
                await self._set_ready(ordinal, ok)

    async def _set_ready(self, ordinal: int, ok: bool) -> None:
        self.ready[ordinal] = ok
        await self.kube.patch("Pod", self.namespace, names.pod(self.name, ordinal), {
            "status": {"phase": "Running", "conditions": [{
                "type": "Ready", "status": "True" if ok else "False",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}},
            subresource="status")

    async def _terminate(self, ordinal: int, pod: dict[str, Any]) -> None:
        if ordinal not in self._since:  # its deletion, seen now
            self._since[ordinal] = time.monotonic()
            seen = await self.on_delete(ordinal) if self.on_delete is not None else None
            revision = (pod["metadata"].get("annotations") or {}).get(
                "streamlet.dev/template-hash")
            self.deletions.append(Deletion(ordinal, revision, seen,
                                           int(pod["metadata"]["resourceVersion"])))
        if time.monotonic() - self._since[ordinal] < self.grace:
            return
        del self._since[ordinal]
        address = self.pods.pods.pop(self._key(ordinal), None)
        if address is not None:
            await asyncio.to_thread(self.launcher.stop, address)  # SIGTERM: the drain
        await self.kube.patch("Pod", self.namespace, pod["metadata"]["name"],
                              {"metadata": {"finalizers": []}})
        self._gone[ordinal] = time.monotonic()

    async def _make(self, ordinal: int, template: dict[str, Any]) -> None:
        meta = template.get("metadata") or {}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": names.pod(self.name, ordinal), "namespace": self.namespace,
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}), "finalizers": [FINALIZER]},
            "spec": {"containers": [dict(c) for c in (template.get("spec") or {}).get(
                "containers") or []]}}
        images = {c.get("image") for c in (template.get("spec") or {}).get("containers") or []}
        pulled = not images & self.bad_images
        if pulled and self._key(ordinal) not in self.pods.pods:
            self.pods.pods[self._key(ordinal)] = await asyncio.to_thread(
                self.launcher.start, self.namespace, self.name, ordinal)
        try:
            made = await self.kube.create(pod)
        except ApiError as e:  # the old one not gone yet: the next step
            if e.status != 409:
                raise
            return
        self.made.append((int(made["metadata"]["resourceVersion"]), ordinal))
        self.ready[ordinal] = False  # until its first probe answers
        status: dict[str, Any] = {"phase": "Pending", "conditions": [{
            "type": "Ready", "status": "False", "reason": "ContainersNotReady",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}
        if not pulled:
            status["containerStatuses"] = [{"name": "broker", "ready": False, "state": {
                "waiting": {"reason": "ImagePullBackOff"}}}]
        await self.kube.patch("Pod", self.namespace, names.pod(self.name, ordinal),
                              {"status": status}, subresource="status")

    @property
    def max_down(self) -> int:
        """The most pods down at once, in the API server's order of writes."""
        changes = sorted([(d.rv, 1, d.ordinal) for d in self.deletions]
                         + [(rv, -1, o) for rv, o in self.made])
        down: set[int] = set()
        most = 0
        for _, change, ordinal in changes:
            if change > 0:
                down.add(ordinal)
            else:
                down.discard(ordinal)
            most = max(most, len(down))
        return most

    @contextlib.asynccontextmanager
    async def running(self, interval: float = 0.1) -> AsyncIterator[StatefulSetController]:
        """Make the pods, and keep acting as the controller until the block ends."""
        async def loop() -> None:
            while True:
                try:
                    await self.step()
                except Exception:  # an API hiccup under load: the next step retries
                    log.exception("test StatefulSet controller step failed")
                await asyncio.sleep(interval)

        task = asyncio.create_task(loop())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            for pod in await self.kube.list("Pod", self.namespace,
                                            labels=names.selector(self.name)):
                await self.kube.patch("Pod", self.namespace, pod["metadata"]["name"],
                                      {"metadata": {"finalizers": []}})


def _http_ok(host: str, port: int, path: str) -> bool:
    """An httpGet probe: a 2xx or 3xx answer within a second."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=1) as r:
            return 200 <= int(r.status) < 400
    except (urllib.error.URLError, OSError, TimeoutError):  # HTTPError is a URLError
        return False


def _tcp_ok(address: tuple[str, int]) -> bool:
    """A tcpSocket probe: a connection within a second."""
    try:
        with socket.create_connection(address, timeout=1):
            return True
    except OSError:
        return False
