"""A cluster on this machine: the strict emulator and the real kopf operator, each in a thread.

Each runs its own event loop, so tests on any loop talk to them as a client does: over HTTP
to the API server, and (for brokers) over the stream protocol.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import kmock

from streamlet.client import connect
from streamlet_operator.brokers import Address, BrokerUnavailable
from streamlet_operator.kube import Kube
from tests.operator.emulator import StrictEmulator
from tests.support.waiting import eventually  # noqa: F401  (the operator tests import it from here)

VERBS = ["get", "list", "watch", "create", "patch", "update", "delete"]


def register_crds(emulator: kmock.KubernetesEmulator) -> None:
    emulator.resources.load_bundled()
    emulator.resources["streamlet.dev/v1alpha1/brokers"] = kmock.ResourceInfo(
        kind="Broker", singular="broker", namespaced=True, verbs=VERBS,
        shortnames={"slb"}, subresources={"status"})
    emulator.resources["streamlet.dev/v1alpha1/streams"] = kmock.ResourceInfo(
        kind="Stream", singular="stream", namespaced=True, verbs=VERBS,
        shortnames={"sls"}, subresources={"status"})
    # Served always; whether the Spark operator is "installed" is its CRD object existing,
    # which is what the operator checks (tests/operator/test_export.py creates and deletes it).
    emulator.resources["sparkoperator.k8s.io/v1beta2/scheduledsparkapplications"] = (
        kmock.ResourceInfo(kind="ScheduledSparkApplication", singular="scheduledsparkapplication",
                           namespaced=True, verbs=VERBS, shortnames={"scheduledsparkapp"},
                           subresources={"status"}))


class LoopThread:
    """A thread running an event loop until its main coroutine ends."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._main: Callable[[], Awaitable[None]] | None = None
        self.error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            assert self._main is not None
            self.loop.run_until_complete(self._main())
        except BaseException as e:  # reported by the fixture, not lost in the thread
            self.error = e
        finally:
            self.loop.close()

    def start(self, main: Callable[[], Awaitable[None]]) -> None:
        self._main = main
        self.thread.start()


class EmulatedApiServer:
    def __init__(self) -> None:
        self._thread = LoopThread("kmock")
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.url = ""
        self.emulator: StrictEmulator | None = None

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with StrictEmulator() as emulator, kmock.Server(emulator) as server:
            register_crds(emulator)
            self.emulator = emulator
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def start(self) -> EmulatedApiServer:
        self._thread.start(self._main)
        if not self._ready.wait(15):
            raise RuntimeError(f"emulator did not start: {self._thread.error!r}")
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._thread.loop.call_soon_threadsafe(self._stop.set)
        self._thread.thread.join(15)


class OperatorRun:
    """The real operator: kopf with streamlet_operator's handlers and a test runtime."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self._thread = LoopThread("kopf")
        self._stop = threading.Event()
        self._ready = threading.Event()

    async def _main(self) -> None:
        import kopf

        import streamlet_operator.handlers  # noqa: F401  (registers the handlers)

        await kopf.operator(standalone=True, clusterwide=True, memo=kopf.Memo(runtime=self.runtime),
                            stop_flag=self._stop, ready_flag=self._ready)

    def start(self) -> OperatorRun:
        self._thread.start(self._main)
        if not self._ready.wait(30):
            raise RuntimeError(f"kopf did not start: {self._thread.error!r}")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.thread.join(30)

    @property
    def error(self) -> BaseException | None:
        return self._thread.error


class PodAddresses:
    """The address resolver tests give the operator: pods map to brokers on 127.0.0.1."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str, int], Address] = {}

    def __call__(self, namespace: str, broker: str, ordinal: int, port: int) -> Address:
        try:
            return self.pods[(namespace, broker, ordinal)]
        except KeyError:
            raise BrokerUnavailable(f"pod {broker}-{ordinal} is not running") from None


def kube_client(url: str) -> Kube:
    return Kube(url, insecure=True)


async def read_all(address: Address, stream: str, count: int, timeout: float = 30) -> list[bytes]:
    """The first ``count`` message bodies of ``stream`` read from the broker at ``address``."""
    client = await connect(*address)
    got: list[bytes] = []
    try:
        reader = await client.consumer(stream, offset="first")
        async with asyncio.timeout(timeout):
            async for message in reader:
                got.append(bytes(message.body))
                if len(got) == count:
                    break
        await reader.close()
    finally:
        await client.close()
    return got
