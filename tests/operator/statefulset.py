"""The test plays the StatefulSet controller with ``updateStrategy: OnDelete`` and the kubelet,
for one Broker: a Pod per ordinal made from the StatefulSet's template as it is then, its broker
process started and the Pod marked Ready once it listens; a deleted Pod keeps its broker for
``grace`` seconds (the preStop sleep), then has it stopped, and is made again ``restart_delay``
seconds after it is gone. A Pod whose template names an image of ``bad_images`` runs no
broker and stays not Ready (ImagePullBackOff), as the kubelet leaves a pod it cannot pull.

It records what a test asserts on: each deletion seen (with what ``on_delete`` says then), and
the most pods down at once in the API server's order (resourceVersions), which no sluggishness
of this loop can hide.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
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
            "annotations": dict(meta.get("annotations") or {}), "finalizers": [FINALIZER]}}
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
        status: dict[str, Any] = {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}
        if not pulled:
            status = {"phase": "Pending", "conditions": [{
                "type": "Ready", "status": "False", "reason": "ContainersNotReady",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}],
                "containerStatuses": [{"name": "broker", "ready": False, "state": {
                    "waiting": {"reason": "ImagePullBackOff"}}}]}
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
