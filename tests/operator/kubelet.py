"""The test plays Kubernetes' controllers: it runs the pods of the StatefulSets the operator made.

A "pod" is a real broker, `python -m streamlet serve` on 127.0.0.1, with a data folder of its
own (its PVC) and the Broker's stream directory file, which the kubelet fills from the
directory ConfigMap as it would a ConfigMap volume. Readiness goes into the StatefulSet's
status as the StatefulSet controller would write it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from streamlet.client import connect
from streamlet_operator import names
from streamlet_operator.brokers import Address
from streamlet_operator.kube import Kube
from tests.operator.harness import PodAddresses
from tests.support.brokers import BrokerProcess


class Launcher(Protocol):
    def start(self, namespace: str, broker: str, ordinal: int) -> Address: ...

    def stop(self, address: Address) -> None: ...

    def directory_file(self, namespace: str, broker: str) -> Path: ...


class ProcessLauncher:
    """Real broker processes; a pod's data folder survives its restart, as its PVC would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: dict[Address, BrokerProcess] = {}

    def start(self, namespace: str, broker: str, ordinal: int) -> Address:
        data = self.root / namespace / f"{broker}-{ordinal}" / "data"
        data.parent.mkdir(parents=True, exist_ok=True)
        config = data.parent / "streamlet.toml"
        config.write_text(f'[cluster]\ndirectory_file = "{self.directory_file(namespace, broker)}"\n')
        proc = BrokerProcess(data, config=config).start()
        address = (proc.host, proc.port)
        self.procs[address] = proc
        return address

    def stop(self, address: Address) -> None:
        proc = self.procs.pop(address, None)
        if proc is not None:
            proc.stop()

    def directory_file(self, namespace: str, broker: str) -> Path:
        """The file every pod of the Broker reads: its one directory ConfigMap "volume"."""
        path = self.root / namespace / f"{broker}-directory" / names.DIRECTORY_KEY
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def stop_all(self) -> None:
        for address in list(self.procs):
            self.stop(address)


class ClientProbe:
    """What a test asks a pod directly, as an admin would with a client."""

    async def exists(self, address: Address, name: str) -> bool:
        """Whether the pod holds the stream (StreamStats: Metadata would follow the directory)."""
        client = await connect(*address)
        try:
            await client.stream_stats(name)
            return True
        except Exception as e:
            if "DOES_NOT_EXIST" in str(getattr(getattr(e, "code", None), "name", e)):
                return False
            raise
        finally:
            await client.close()

    async def delete(self, address: Address, name: str) -> None:
        client = await connect(*address)
        try:
            await client.delete_stream(name)
        finally:
            await client.close()


class Kubelet:
    def __init__(self, kube: Kube, pods: PodAddresses, launcher: Launcher) -> None:
        self.kube = kube
        self.pods = pods
        self.launcher = launcher

    async def sync(self, namespace: str, name: str) -> list[Address]:
        """Run as many pods as the StatefulSet asks for; report them ready."""
        sts = await self.kube.get("StatefulSet", namespace, name)
        assert sts is not None, f"no StatefulSet {namespace}/{name}"
        replicas = int(sts["spec"]["replicas"])
        for ordinal in range(replicas):
            if (namespace, name, ordinal) not in self.pods.pods:
                self.pods.pods[(namespace, name, ordinal)] = self.launcher.start(
                    namespace, name, ordinal)
        for (ns, broker, ordinal), address in list(self.pods.pods.items()):
            if ns == namespace and broker == name and ordinal >= replicas:
                self.launcher.stop(address)
                del self.pods.pods[(ns, broker, ordinal)]
        await self.claims(namespace, sts)
        await self.kube.patch("StatefulSet", namespace, name, {"status": {
            "replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
            "observedGeneration": sts["metadata"].get("generation", 1)}}, subresource="status")
        await self.sync_directory(namespace, name)
        return [self.pods.pods[(namespace, name, o)] for o in range(replicas)]

    async def claims(self, namespace: str, sts: dict[str, Any]) -> None:
        """The StatefulSet controller's PVCs: one per volumeClaimTemplate and pod, made once
        (never changed from the template again), bound at the size asked for."""
        for vct in sts["spec"].get("volumeClaimTemplates") or []:
            for ordinal in range(int(sts["spec"]["replicas"])):
                claim = f"{vct['metadata']['name']}-{sts['metadata']['name']}-{ordinal}"
                if await self.kube.get("PersistentVolumeClaim", namespace, claim) is not None:
                    continue
                spec = vct.get("spec") or {}
                await self.kube.create({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim, "namespace": namespace,
                                 "labels": dict(vct["metadata"].get("labels") or {})},
                    "spec": spec})
                await self.kube.patch("PersistentVolumeClaim", namespace, claim, {"status": {
                    "phase": "Bound", "capacity": dict(spec["resources"]["requests"])}},
                    subresource="status")

    async def sync_directory(self, namespace: str, name: str) -> str | None:
        """Write the directory ConfigMap's content to the pods' file, replacing it in one step
        as the kubelet swaps a ConfigMap volume; returns the content (None: no ConfigMap yet)."""
        cm = await self.kube.get("ConfigMap", namespace, names.directory_configmap(name))
        if cm is None:
            return None
        text: str = (cm.get("data") or {}).get(names.DIRECTORY_KEY, "")
        path = self.launcher.directory_file(namespace, name)
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        return text

    @contextlib.asynccontextmanager
    async def delivering_directory(self, namespace: str, name: str) -> AsyncIterator[None]:
        """Keep copying the directory ConfigMap to the pods' file in the background, as the
        kubelet does: a move waits for the old pod to read the directory naming the new one."""
        async def loop() -> None:
            while True:
                await self.sync_directory(namespace, name)
                await asyncio.sleep(0.2)
        task = asyncio.create_task(loop())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def kill(self, namespace: str, name: str, ordinal: int) -> None:
        """The pod's broker stops; its data folder (the PVC) stays."""
        address = self.pods.pods.pop((namespace, name, ordinal))
        self.launcher.stop(address)

    def restart(self, namespace: str, name: str, ordinal: int) -> Address:
        """The pod comes back on the same volume (at a new address: tests resolve it anew)."""
        address = self.launcher.start(namespace, name, ordinal)
        self.pods.pods[(namespace, name, ordinal)] = address
        return address
