"""The test plays Kubernetes' controllers: it runs the pods of the StatefulSets the operator made.

A "pod" is a broker reachable on 127.0.0.1: a real `python -m streamlet serve` process, or an
in-memory FakeBroker where no real broker can run. Readiness goes into the StatefulSet's status
as the StatefulSet controller would write it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from streamlet_operator.brokers import Address
from streamlet_operator.kube import Kube
from tests.operator.fakes import FakeBroker, FakeBrokerAdmin
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


class FakeLauncher:
    def __init__(self, admin: FakeBrokerAdmin) -> None:
        self.admin = admin
        self._next = 20000

    def start(self, namespace: str, broker: str, ordinal: int) -> Address:
        self._next += 1
        address = ("127.0.0.1", self._next)
        self.admin.brokers[address] = FakeBroker()
        return address

    def stop(self, address: Address) -> None:
        self.admin.brokers.pop(address, None)

    def stop_all(self) -> None:
        self.admin.brokers.clear()


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
        address = self.pods.pods.pop((namespace, name, ordinal))
        self.launcher.stop(address)
