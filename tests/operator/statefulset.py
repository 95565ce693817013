"""The test plays the StatefulSet controller with ``updateStrategy: OnDelete`` and the kubelet,
for one Broker: a Pod object per ordinal, made from the StatefulSet's template as it is when
the pod is made (its labels and annotations: the template hash the operator compares), its
broker process started and the Pod marked Ready once the broker listens. A Pod deleted (it
carries a finalizer, so it is Terminating as during a grace period) has its broker stopped
(SIGTERM), then its finalizer removed, and is made again from the template then current.

It records what a test asserts on: each deletion seen (with whatever ``on_delete`` says at
that moment, e.g. the streams the pod led), and the most pods down at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
    down: set[int] = field(default_factory=set)
    max_down: int = 0
    #: pods made again after a deletion, by ordinal
    remade: dict[int, int] = field(default_factory=dict)

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
            elif pod is None:
                await self._make(ordinal, template)

    async def _terminate(self, ordinal: int, pod: dict[str, Any]) -> None:
        self.down.add(ordinal)
        self.max_down = max(self.max_down, len(self.down))
        seen = await self.on_delete(ordinal) if self.on_delete is not None else None
        revision = (pod["metadata"].get("annotations") or {}).get("streamlet.dev/template-hash")
        self.deletions.append(Deletion(ordinal, revision, seen))
        address = self.pods.pods.pop(self._key(ordinal), None)
        if address is not None:
            await asyncio.to_thread(self.launcher.stop, address)  # SIGTERM: the drain
        await self.kube.patch("Pod", self.namespace, pod["metadata"]["name"],
                              {"metadata": {"finalizers": []}})

    async def _make(self, ordinal: int, template: dict[str, Any]) -> None:
        meta = template.get("metadata") or {}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": names.pod(self.name, ordinal), "namespace": self.namespace,
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}), "finalizers": [FINALIZER]}}
        if self._key(ordinal) not in self.pods.pods:
            self.pods.pods[self._key(ordinal)] = await asyncio.to_thread(
                self.launcher.start, self.namespace, self.name, ordinal)
        try:
            await self.kube.create(pod)
        except ApiError as e:  # the old one not gone yet: the next step
            if e.status != 409:
                raise
            return
        await self.kube.patch("Pod", self.namespace, names.pod(self.name, ordinal), {
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
            subresource="status")
        if ordinal in self.down:
            self.down.discard(ordinal)
            self.remade[ordinal] = self.remade.get(ordinal, 0) + 1

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
