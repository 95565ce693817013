"""The test plays Kubernetes' controllers: it runs the pods of the StatefulSets the operator made.

A "pod" is a real broker, `python -m streamlet serve` on 127.0.0.1, with a data folder of its
own (its PVC). Readiness goes into the StatefulSet's status as the StatefulSet controller would
write it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from streamlet.client import connect
from streamlet_operator.brokers import Address
from streamlet_operator.kube import Kube
from tests.operator.harness import PodAddresses
from tests.support.brokers import BrokerProcess


class Launcher(Protocol):
    def start(self, namespace: str, broker: str, ordinal: int) -> Address: ...

    def stop(self, address: Address) -> None: ...


class ProcessLauncher:
    """Real broker processes; a pod's data folder survives its restart, as its PVC would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: dict[Address, BrokerProcess] = {}

    def start(self, namespace: str, broker: str, ordinal: int) -> Address:
        data = self.root / namespace / f"{broker}-{ordinal}" / "data"
        data.parent.mkdir(parents=True, exist_ok=True)
        proc = BrokerProcess(data).start()
        address = (proc.host, proc.port)
        self.procs[address] = proc
        return address

    def stop(self, address: Address) -> None:
        proc = self.procs.pop(address, None)
        if proc is not None:
            proc.stop()

    def stop_all(self) -> None:
        for address in list(self.procs):
            self.stop(address)


class ClientProbe:
    """What a test asks a pod directly, as an admin would with a client."""

    async def exists(self, address: Address, name: str) -> bool:
        client = await connect(*address)
        try:
            return bool(await client.stream_exists(name))
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
        await self.kube.patch("StatefulSet", namespace, name, {"status": {
            "replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
            "observedGeneration": sts["metadata"].get("generation", 1)}}, subresource="status")
        return [self.pods.pods[(namespace, name, o)] for o in range(replicas)]

    def kill(self, namespace: str, name: str, ordinal: int) -> None:
        """The pod's broker stops; its data folder (the PVC) stays."""
        address = self.pods.pods.pop((namespace, name, ordinal))
        self.launcher.stop(address)

    def restart(self, namespace: str, name: str, ordinal: int) -> Address:
        """The pod comes back on the same volume (at a new address: tests resolve it anew)."""
        address = self.launcher.start(namespace, name, ordinal)
        self.pods.pods[(namespace, name, ordinal)] = address
        return address
