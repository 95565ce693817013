"""One emulated API server and one real kopf operator for all of tests/operator.

kopf's startup costs about a second; sharing the run keeps the suite fast. Tests stay
independent by each working in its own namespace.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

# The operator's timers take their intervals at import: short ones, so drift is repaired quickly.
os.environ.setdefault("STREAMLET_OPERATOR_BROKER_INTERVAL", "1")
os.environ.setdefault("STREAMLET_OPERATOR_STREAM_INTERVAL", "1")

import kopf  # noqa: E402
import pytest  # noqa: E402

from streamlet_operator.brokers import (  # noqa: E402
    Address,
    BrokerSession,
    ClientBrokerAdmin,
    ClientTls,
)
from streamlet_operator.kube import Kube  # noqa: E402
from streamlet_operator.model import BrokerModel  # noqa: E402
from streamlet_operator.runtime import Runtime  # noqa: E402
from tests.operator.harness import (  # noqa: E402
    EmulatedApiServer,
    OperatorRun,
    PodAddresses,
    eventually,
    kube_client,
)
from tests.operator.kubelet import ClientProbe, Kubelet, ProcessLauncher  # noqa: E402

_API: dict[str, str] = {}


@kopf.on.login()
def _login_to_emulator(**_: object) -> kopf.ConnectionInfo:
    # Having a login handler also keeps kopf from looking for a kubeconfig.
    return kopf.ConnectionInfo(server=_API["url"], insecure=True)


async def _guest(namespace: str, broker: str) -> tuple[str, str]:
    return "guest", "guest"  # the default user of a broker started without users


def _advertised(pods: PodAddresses) -> Callable[[BrokerModel, int], Awaitable[str | None]]:
    """What each test pod advertises: its broker listens on 127.0.0.1 at a port of its own."""
    async def advertised(broker: BrokerModel, ordinal: int) -> str | None:
        address = pods.pods.get((broker.namespace, broker.name, ordinal))
        return f"{address[0]}:{address[1]}" if address else None
    return advertised


class _RecordingSession:
    """A session that notes each Create the broker accepted: (pod, stream, arguments)."""

    def __init__(self, session: BrokerSession, address: Address,
                 creates: list[tuple[Address, str, dict[str, str]]]) -> None:
        self._session, self._address, self._creates = session, address, creates

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def create_stream(self, name: str, arguments: dict[str, str]) -> bool:
        made = await self._session.create_stream(name, arguments)
        if made:
            self._creates.append((self._address, name, dict(arguments)))
        return made


class RecordingAdmin(ClientBrokerAdmin):
    """The operator's real admin, keeping the Create arguments it sent: brokers here have no
    cluster.peers, so they accept initial-cluster-size and make one copy (replicated creates
    between brokers are tests/cluster's); what the operator asks for is checked here."""

    def __init__(self) -> None:
        super().__init__()
        self.creates: list[tuple[Address, str, dict[str, str]]] = []

    @contextlib.asynccontextmanager
    async def session(self, address: Address, user: str, password: str,
                      tls: ClientTls | None = None) -> AsyncIterator[Any]:
        async with super().session(address, user, password, tls) as session:
            yield _RecordingSession(session, address, self.creates)


@dataclass
class Cluster:
    api: EmulatedApiServer
    operator: OperatorRun
    pods: PodAddresses
    launcher: ProcessLauncher
    probe: ClientProbe
    admin: RecordingAdmin

    @property
    def url(self) -> str:
        return self.api.url


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    api = EmulatedApiServer().start()
    _API["url"] = api.url
    pods = PodAddresses()
    admin = RecordingAdmin()
    runtime = Runtime(kube=kube_client(api.url), admin=admin, resolve=pods,
                      credentials=_guest, advertised=_advertised(pods))
    operator = OperatorRun(runtime).start()
    launcher = ProcessLauncher(tmp_path_factory.mktemp("pods"))
    try:
        yield Cluster(api, operator, pods, launcher, ClientProbe(), admin)
    finally:
        operator.stop()
        launcher.stop_all()
        api.stop()
    assert operator.error is None, f"the operator crashed: {operator.error!r}"


_namespaces = itertools.count()


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[Kube]:
    client = kube_client(cluster.url)
    yield client
    await client.close()


@pytest.fixture
async def namespace(request: pytest.FixtureRequest, kube: Kube,
                    cluster: Cluster) -> AsyncIterator[str]:
    """A namespace of its own; emptied afterwards so its timers stop loading the operator."""
    name = f"t{next(_namespaces)}-{request.node.name[5:45].lower().replace('_', '-')}".rstrip("-")
    yield name
    # Streams first, while their pods still run: their finalizers delete them on the brokers.
    for obj in await kube.list("Stream", name):
        await kube.delete("Stream", name, obj["metadata"]["name"])
    with contextlib.suppress(AssertionError):  # over 5 s after a test failed mid-move
        await eventually(lambda: _none_left(kube, name), timeout=30, what="streams finalized")
    for obj in await kube.list("Broker", name):
        await kube.delete("Broker", name, obj["metadata"]["name"])
    for (ns, broker, ordinal) in list(cluster.pods.pods):
        if ns == name:
            cluster.launcher.stop(cluster.pods.pods.pop((ns, broker, ordinal)))


async def _none_left(kube: Kube, namespace: str) -> bool:
    return not await kube.list("Stream", namespace)


@pytest.fixture
def kubelet(cluster: Cluster, kube: Kube) -> Kubelet:
    return Kubelet(kube, cluster.pods, cluster.launcher)

