"""The operator's Lease: the rule (create, take, renew, wait, lost) and the leader's deadline as
tables; the command line's checks; and two electors against the emulated API server: one takes
the Lease, the other waits, takes it once it expires (a new token) or at once when released,
and the first finds it lost; every write a compare-and-swap. A write fenced by the token (the
directory ConfigMap's) is refused to a lower token than the object's last writer's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

import streamlet_operator.__main__ as entry
from streamlet_operator import lease
from streamlet_operator.kube import Kube
from streamlet_operator.lease import (
    Action,
    Decision,
    LeaderElector,
    LeaseView,
    decide,
    fenced_apply,
)
from tests.operator.harness import EmulatedApiServer, kube_client
from tests.support.brokers import free_port

ME, OTHER = "operator-a", "operator-b"


def _lease(holder: str | None, transitions: int = 3, duration: float = 15) -> LeaseView:
    return LeaseView(holder, duration, transitions, "2026-01-01T00:00:00.000000Z")


@pytest.mark.parametrize(("view", "leading", "now", "observed", "expected"), [
    pytest.param(None, False, 100, None, Decision(Action.CREATE, 1), id="none: create it"),
    pytest.param(_lease(None), False, 100, 100, Decision(Action.TAKE, 4),
                 id="free (released): take it, a new token"),
    pytest.param(_lease(OTHER), False, 100, None, Decision(Action.WAIT), id="another's: wait"),
    pytest.param(_lease(OTHER), False, 114.9, 100, Decision(Action.WAIT),
                 id="another's, silent under its duration: wait"),
    pytest.param(_lease(OTHER), False, 115, 100, Decision(Action.TAKE, 4),
                 id="another's, silent for its duration: expired, take it"),
    pytest.param(_lease(OTHER, duration=1), False, 101, 100, Decision(Action.TAKE, 4),
                 id="the Lease's own duration counts, not this replica's"),
    pytest.param(_lease(ME), True, 100, 50, Decision(Action.RENEW, 3),
                 id="mine, leading: renew, the same token"),
    pytest.param(_lease(ME), False, 100, 100, Decision(Action.TAKE, 4),
                 id="mine from a former process: taken again, a new token"),
    pytest.param(_lease(OTHER), True, 100, 100, Decision(Action.LOST),
                 id="leading, another holds it: lost"),
    pytest.param(_lease(None), True, 100, 100, Decision(Action.LOST),
                 id="leading, nobody holds it: lost"),
])
def test_decide(view: LeaseView | None, leading: bool, now: float, observed: float | None,
                expected: Decision) -> None:
    assert decide(view, ME, leading, now, observed) == expected


@pytest.mark.parametrize(("renewed", "now", "leading"), [
    (100, 100, True), (100, 109.9, True), (100, 110, False), (100, 200, False)])
def test_a_leader_stops_at_its_renew_deadline(renewed: float, now: float, leading: bool) -> None:
    assert lease.still_leading(renewed, now, 10) is leading


@pytest.mark.parametrize(("duration", "deadline", "retry", "refused"), [
    (15, 10, 2, None), (6, 4, 1, None),
    (10, 10, 2, "--lease-renew-deadline"), (10, 12, 2, "--lease-renew-deadline"),
    (15, 10, 10, "--lease-retry"), (15, 10, 0, "--lease-retry")])
def test_timings(duration: float, deadline: float, retry: float, refused: str | None) -> None:
    why = lease.check_timings(duration, deadline, retry)
    assert why is None if refused is None else why is not None and refused in why


def test_the_command_line() -> None:
    args = entry.parse(["--lease", "streamlet-operator", "-n", "team-a"])
    options = entry.run_options(args)
    assert options["standalone"] is True and "peering_name" not in options
    assert entry.lease_namespace(args) in ("team-a", entry.SETTINGS.namespace)
    assert entry.lease_namespace(entry.parse(["--lease", "l", "--lease-namespace", "x"])) == "x"
    assert entry.identity(entry.parse(["--lease", "l", "--identity", "me"])) == "me"
    with pytest.raises(SystemExit):
        entry.parse(["--lease", "l", "--peering", "p"])  # one or the other
    with pytest.raises(SystemExit):
        entry.parse(["--lease", "l", "--lease-duration", "5", "--lease-renew-deadline", "5"])


@pytest.fixture(autouse=True)
def _no_token_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """An elector here sets this process's token: put back after each test, so the operator
    tests that follow in this process run without a Lease, as they expect."""
    monkeypatch.setattr(lease, "_token", None)


@pytest.fixture(scope="module")
def api() -> Iterator[EmulatedApiServer]:
    server = EmulatedApiServer().start()
    yield server
    server.stop()


@pytest.fixture
async def kube(api: EmulatedApiServer) -> AsyncIterator[Kube]:
    client = kube_client(api.url)
    yield client
    await client.close()


def _elector(kube: Kube, name: str, identity: str) -> LeaderElector:
    return LeaderElector(kube, "default", name, identity, duration=2, renew_deadline=1.5,
                         retry=0.2)


async def test_two_electors(kube: Kube) -> None:
    first, second = _elector(kube, "two", ME), _elector(kube, "two", OTHER)
    assert await first.acquire() == 1  # created, held
    assert lease.fencing_token() == 1
    assert await second.attempt() is Action.WAIT and not second.leading
    assert await first.attempt() is Action.RENEW and first.token == 1

    # A stale write loses: the Lease changed since it was read (409, nothing written).
    body = await kube.get("Lease", "default", "two")
    assert body is not None
    await first.attempt()
    with pytest.raises(Exception, match="409"):
        await kube.patch("Lease", "default", "two", {
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
            "spec": {"holderIdentity": OTHER}})

    # The first stops renewing: the second takes the Lease once it is silent for its duration.
    assert await second.acquire() == 2
    spec = (await kube.get("Lease", "default", "two") or {})["spec"]
    assert spec["holderIdentity"] == OTHER and spec["leaseTransitions"] == 2
    assert spec["leaseDurationSeconds"] == 2 and spec["acquireTime"] and spec["renewTime"]
    assert await first.attempt() is Action.LOST and not first.leading
    assert "held by operator-b" in await _lost(first)

    # Released, it is taken at once by the next try, with a new token.
    await second.release()
    assert lease.fencing_token() is None
    third = _elector(kube, "two", "operator-c")
    assert await third.attempt() is Action.TAKE and third.token == 3


async def _lost(elector: LeaderElector) -> str:
    # as if it had not noticed yet, renewed just now: keep() returns why it stops
    elector.leading, elector.last_renewed = True, time.monotonic()
    return await elector.keep()


async def test_a_leader_whose_renewals_hang_stops_at_its_deadline(kube: Kube) -> None:
    elector = _elector(kube, "hung", ME)
    await elector.acquire()

    async def hang() -> Action:
        await asyncio.sleep(60)
        return Action.RENEW

    elector.attempt = hang  # type: ignore[method-assign]  # an API server that never answers
    started = time.monotonic()
    assert await elector.keep() == "not renewed for 1.5 s"
    assert time.monotonic() - started < 1.5 + 5  # the deadline, not the hung call's 60 s


def _configmap(data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "directory", "namespace": "default"}, "data": {"d": data}}


async def test_a_write_is_fenced_by_the_highest_writers_token(kube: Kube) -> None:
    async def written() -> tuple[str, str | None]:
        body = await kube.get("ConfigMap", "default", "directory") or {}
        annotations = body["metadata"].get("annotations") or {}
        return body["data"]["d"], annotations.get(lease.FENCING_ANNOTATION)

    assert await fenced_apply(kube, _configmap("by 2"), 2)  # created
    assert await written() == ("by 2", "2")
    assert not await fenced_apply(kube, _configmap("by 1"), 1), "a deposed leader's write"
    assert await written() == ("by 2", "2")
    rv = (await kube.get("ConfigMap", "default", "directory") or {})["metadata"]["resourceVersion"]
    assert await fenced_apply(kube, _configmap("by 2"), 2)  # unchanged: not written again
    assert (await kube.get("ConfigMap", "default", "directory") or {})[
        "metadata"]["resourceVersion"] == rv
    assert await fenced_apply(kube, _configmap("by 3"), 3)
    assert await written() == ("by 3", "3")
    assert await fenced_apply(kube, _configmap("no lease"), None)  # a plain apply
    assert await written() == ("no lease", "3")


async def test_a_waiting_replica_answers_its_liveness_probe() -> None:
    """kopf serves the liveness endpoint once it runs; a replica waiting for the Lease serves
    it meanwhile, or the kubelet would restart every waiting replica."""
    port = free_port()
    runner = await entry._waiting_liveness(f"http://127.0.0.1:{port}/healthz")
    try:
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{port}/healthz") as rsp:
            assert rsp.status == 200
            assert await rsp.json() == {"waiting": "for the lease"}
    finally:
        await runner.cleanup()
    assert await entry._waiting_liveness("") is None  # no liveness endpoint asked for
