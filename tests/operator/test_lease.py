"""Two operator replicas, each a real process (tests/operator/peering_main.py: the production
entry point with --lease) against one emulated API server: the one holding the Lease acts on
the Brokers, the other waits (its kopf not started); the leader stopped dead (SIGSTOP: hung, or
cut off), the other takes the Lease within leaseDuration and a retry, with the next fencing
token, and acts; the old leader, let run again, finds the Lease lost and exits 1, and a real
broker refuses a request carrying its token. A leader stopped by SIGTERM releases the Lease,
taken at once. The stream directories it writes carry its token."""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.driver.elector import Members
from streamlet.rabbitmq import Code
from streamlet.rabbitmq.frames import replication as rf
from streamlet_operator import names
from streamlet_operator.kube import Kube
from streamlet_operator.lease import FENCING_ANNOTATION
from tests.operator.harness import EmulatedApiServer, eventually, kube_client
from tests.operator.test_peering import Replica
from tests.support.brokers import BrokerProcess, distinct_ports

pytestmark = pytest.mark.process

NAMESPACE = "leasing"
LEASE = "streamlet-operator"
DURATION, RENEW_DEADLINE, RETRY = 6, 4, 1
OPTIONS = ["--lease", LEASE, "--lease-namespace", NAMESPACE, "--lease-duration", str(DURATION),
           "--lease-renew-deadline", str(RENEW_DEADLINE), "--lease-retry", str(RETRY)]
# Generous: two operator processes start on a loaded machine with 2 cores.
STARTUP = 120.0
# The takeover's bound: the Lease's duration and one retry, and room for a loaded machine.
TAKEOVER = DURATION + RETRY + 20


@pytest.fixture
def api() -> Iterator[EmulatedApiServer]:
    """An API server of its own: the package's shared operator must not act here too."""
    server = EmulatedApiServer().start()
    yield server
    server.stop()


@pytest.fixture
async def kube(api: EmulatedApiServer) -> AsyncIterator[Kube]:
    client = kube_client(api.url)
    yield client
    await client.close()


def _broker(name: str) -> dict[str, Any]:
    return {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": 1, "image": "ghcr.io/streamlet/broker:0.1.0"}}


async def _lease(kube: Kube) -> dict[str, Any]:
    return ((await kube.get("Lease", NAMESPACE, LEASE)) or {}).get("spec") or {}


def _holder(kube: Kube, who: str) -> Callable[[], Any]:
    async def holds() -> bool:
        return (await _lease(kube)).get("holderIdentity") == who
    return holds


async def _has_statefulset(kube: Kube, name: str) -> bool:
    return await kube.get("StatefulSet", NAMESPACE, name) is not None


async def _directory_token(kube: Kube, broker: str, token: str) -> bool:
    body = await kube.get("ConfigMap", NAMESPACE, names.directory_configmap(broker)) or {}
    return bool((body.get("metadata") or {}).get("annotations", {}).get(FENCING_ANNOTATION)
                == token)


async def _grew(replica: Replica, at_least: float) -> bool:
    count = await replica.broker_reconciliations()
    return count is not None and count >= at_least


async def test_the_lease_holder_acts_and_a_deposed_one_is_fenced(
        api: EmulatedApiServer, kube: Kube, tmp_path: Path,
        broker_factory: Callable[..., BrokerProcess]) -> None:
    await kube.create(_broker("first"))
    first = Replica("operator-a", api.url, OPTIONS, tmp_path / "a.log")
    second = Replica("operator-b", api.url, OPTIONS, tmp_path / "b.log")
    try:
        first.start()
        await eventually(_holder(kube, "operator-a"), timeout=STARTUP,
                         what="the first replica holds the Lease")
        await eventually(lambda: _has_statefulset(kube, "first"), timeout=STARTUP,
                         what="the first replica made the first Broker's StatefulSet")
        second.start()
        await eventually(lambda: _grew(second, 0), timeout=STARTUP,
                         what="the second replica's metrics answer")
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
        assert (await _lease(kube))["leaseTransitions"] == 1

        # The leader stops dead (no release): the second takes the Lease once it expires.
        assert first.proc is not None
        first.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        await eventually(_holder(kube, "operator-b"), timeout=TAKEOVER,
                         what="the second replica took the Lease")
        took = time.monotonic() - stopped
        spec = await _lease(kube)
        assert spec["leaseTransitions"] == 2, spec
        await eventually(lambda: _grew(second, 1), timeout=STARTUP,
                         what="the second replica reconciling")
        await kube.create(_broker("third"))
        await eventually(lambda: _has_statefulset(kube, "third"), timeout=STARTUP,
                         what="the second replica made the third Broker's StatefulSet")
        # Its writes of the stream directories carry its token: the old leader's would not be
        # written over them (lease.fenced_apply).
        for broker in ("first", "third"):
            await eventually(functools.partial(_directory_token, kube, broker, "2"),
                             timeout=STARTUP,
                             what=f"the {broker} Broker's directory written with token 2")

        # The old leader runs again: it finds the Lease lost and exits at once.
        first.proc.send_signal(signal.SIGCONT)
        await eventually(lambda: first.proc is not None and first.proc.poll() is not None,
                         timeout=STARTUP, what="the deposed replica exited")
        assert first.proc.returncode == 1
        log_a = (tmp_path / "a.log").read_text()
        assert "lease streamlet-operator lost" in log_a, log_a[-3000:]
        log_b = (tmp_path / "b.log").read_text()
        assert "leading, fencing token 2" in log_b, log_b[-3000:]
        print(f"the Lease was taken {took:.1f} s after its holder stopped "
              f"(duration {DURATION} s, retry {RETRY} s)")
        assert took < TAKEOVER

        # A request of the deposed leader (token 1) to a real broker that has seen the new
        # leader's (2): refused; the new leader's is taken.
        member = _member(tmp_path, broker_factory)
        async with await connect(member.host, member.port) as client:
            await client.create_stream("s")
        new, old = (Members(lambda _: (member.host, member.port), token=t) for t in (2, 1))
        assert (await new.request(0, lambda c: rf.Fence(c, "s", 1))).code == Code.OK
        refused = await old.request(0, lambda c: rf.Fence(c, "s", 2))
        assert refused.code == Code.ACCESS_REFUSED
        assert "fencing token 1 is below 2" in member.log_text()

        # The leader stopped by SIGTERM gives the Lease up: free at once, not after expiry.
        second.stop()
        assert second.proc is not None and second.proc.returncode == 0
        spec = await _lease(kube)
        assert not spec.get("holderIdentity"), spec
    finally:
        if first.proc is not None and first.proc.poll() is None:
            first.proc.send_signal(signal.SIGCONT)
        first.stop()
        second.stop()


def _member(tmp_path: Path, broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """Member 0 of a two-broker cluster whose other peer runs nothing."""
    me, other = distinct_ports(2)
    config = tmp_path / "member.toml"
    config.write_text(f'[cluster]\nmember = 0\npeers = ["127.0.0.1:{me}", "127.0.0.1:{other}"]\n')
    return broker_factory(config=config, port=me)
