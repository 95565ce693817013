"""Pods that replicate: each broker knows its member id and every pod's address, as the
operator's configuration gives pods on Kubernetes (``member``, ``peers``, ``resume_roles``),
with 127.0.0.1 ports for the pods' DNS names. A pod keeps its port across restarts (a pod's
DNS name does not change), so its peers keep reaching it.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Any

from streamlet_operator.brokers import Address
from streamlet_operator.kube import Kube
from tests.operator.harness import eventually
from tests.operator.kubelet import ProcessLauncher
from tests.support.brokers import BrokerProcess, distinct_ports


class PeeredLauncher(ProcessLauncher):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ports: dict[tuple[str, str], list[int]] = {}
        #: each pod's metrics port (its /ready), by Broker
        self.metrics: dict[tuple[str, str], list[int]] = {}

    def plan(self, namespace: str, broker: str, pods: int) -> None:
        """Choose the ports of the Broker's ``pods`` pods before any starts: the stream port
        and the metrics port of each."""
        ports = distinct_ports(2 * pods)
        self.ports[(namespace, broker)] = ports[:pods]
        self.metrics[(namespace, broker)] = ports[pods:]

    def metrics_port(self, namespace: str, broker: str, ordinal: int) -> int:
        return self.metrics[(namespace, broker)][ordinal]

    def start(self, namespace: str, broker: str, ordinal: int) -> Address:
        ports = self.ports[(namespace, broker)]
        data = self.root / namespace / f"{broker}-{ordinal}" / "data"
        data.parent.mkdir(parents=True, exist_ok=True)
        config = data.parent / "streamlet.toml"
        peers = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
        config.write_text(
            "[cluster]\n"
            f'directory_file = "{self.directory_file(namespace, broker)}"\n'
            f"member = {ordinal}\npeers = [{peers}]\nresume_roles = true\n")
        proc = BrokerProcess(data, port=ports[ordinal], config=config, extra_args=[
            "--metrics-port", str(self.metrics_port(namespace, broker, ordinal))]).start()
        address = (proc.host, proc.port)
        self.procs[address] = proc
        return address

    def kill(self, address: Address) -> None:
        """kill -9: the pod's process dies at once; its data folder (the PVC) stays."""
        proc = self.procs.pop(address, None)
        if proc is not None:
            proc.kill()

    def pause(self, address: Address, paused: bool = True) -> None:
        """SIGSTOP (or SIGCONT): a process that runs but does not answer."""
        proc = self.procs[address]
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)


async def delete_streams(kube: Kube, namespace: str) -> None:
    """A test's end: every Stream of ``namespace`` deleted while its pods still run (their
    finalizers delete them on the brokers), waited for up to 30 s (a teardown, no assertion)."""
    for obj in await kube.list("Stream", namespace):
        await kube.delete("Stream", namespace, obj["metadata"]["name"])

    async def gone() -> bool:
        return not await kube.list("Stream", namespace)
    with contextlib.suppress(AssertionError):
        await eventually(gone, timeout=30, what="streams finalized")


def stop_pods(pods: dict[tuple[str, str, int], Any], launcher: ProcessLauncher,
              namespace: str) -> None:
    """Stop the namespace's pods (their broker processes) and whatever else ``launcher`` ran."""
    for key in [k for k in pods if k[0] == namespace]:
        launcher.stop(pods.pop(key))
    launcher.stop_all()
