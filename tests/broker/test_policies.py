"""Policies against real broker processes: set through the management API (and rabbitmqadmin),
applied live to a running stream (a smaller max-length-bytes deletes the oldest whole segments,
nothing else), kept across a restart, refused with a reason; on a replicated stream, applied on
every member, a member down during the change included once it is back."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from streamlet.client import connect
from streamlet.client.errors import StreamletError
from streamlet.rabbitmq import Code
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from tests.support.brokers import BrokerProcess, distinct_ports, free_port
from tests.support.raw import RawPeer
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]
GUEST = ("guest", "guest")
SEGMENT = 4096


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api"

    def call(self, method: str, path: str, json: Any = None,
             auth: tuple[str, str] = GUEST) -> requests.Response:
        return requests.request(method, self.base + path, json=json, auth=auth, timeout=30)

    def get(self, path: str) -> Any:
        r = self.call("GET", path)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()


def with_api(broker_factory: Factory, config: Path | None = None,
             port: int | None = None) -> tuple[BrokerProcess, Api]:
    http = free_port()
    kw: dict[str, Any] = {"extra_args": ["--http-port", str(http), "--metrics-port", "0"]}
    if config is not None:
        kw["config"] = config
    if port is not None:
        kw["port"] = port
    return broker_factory(**kw), Api(http)


async def fill(b: BrokerProcess, stream: str, rounds: int = 40) -> list[bytes]:
    """``rounds`` chunks of ten 200-byte messages, each confirmed before the next: with
    4 KiB segments, about two chunks a segment."""
    sent: list[bytes] = []
    async with await connect(b.host, b.port) as c:
        producer = await c.producer(stream)
        for r in range(rounds):
            batch = [b"%06d" % (r * 10 + i) + b"x" * 194 for i in range(10)]
            await producer.send_many(batch)
            await asyncio.wait_for(producer.flush(), 30)
            sent += batch
    return sent


async def read_all(b: BrokerProcess, stream: str, upto: int) -> list[bytes]:
    """Every message from the first kept to the one before offset ``upto``."""
    got: list[bytes] = []
    async with await connect(b.host, b.port) as c:
        consumer = await c.consumer(stream, "first", credit=100)
        while True:
            m = await asyncio.wait_for(consumer.__anext__(), 30)
            got.append(bytes(m.body))
            if m.offset >= upto - 1:
                return got


def queue(api: Api, name: str) -> dict[str, Any]:
    q: dict[str, Any] = api.get(f"/queues/%2F/{name}")
    return q


async def test_a_policy_changes_a_running_streams_retention(broker_factory: Factory) -> None:
    b, api = with_api(broker_factory)
    async with await connect(b.host, b.port) as c:
        await c.create_stream("logs", {"stream-max-segment-size-bytes": str(SEGMENT),
                                       "max-length-bytes": "1000000000"})
    sent = await fill(b, "logs")
    before = queue(api, "logs")
    assert before["segments"] >= 10 and before["first_offset"] == 0
    assert before["policy"] is None and before["effective_policy_definition"] == {}
    assert before["retention"]["max-length-bytes"] == 1_000_000_000

    policy = {"pattern": "^lo", "apply-to": "streams", "priority": 1,
              "definition": {"max-length-bytes": 3 * SEGMENT}}
    assert api.call("PUT", "/policies/%2F/small", policy).status_code == 201
    after = queue(api, "logs")  # applied before the answer
    assert after["segments"] <= 4 and after["first_offset"] > 0
    assert after["policy"] == "small"
    assert after["effective_policy_definition"] == {"max-length-bytes": 3 * SEGMENT}
    assert after["retention"] == {"max-age": None, "max-length-bytes": 3 * SEGMENT,
                                  "stream-max-segment-size-bytes": SEGMENT}
    assert after["arguments"]["x-max-length-bytes"] == 1_000_000_000  # as created
    kept = await read_all(b, "logs", after["committed_offset"] + 1)
    assert kept == sent[-len(kept):] and len(kept) >= 2 * 10, "only whole old segments went"

    # the listing, in RabbitMQ's shape; an update is 204
    shown = {"vhost": "/", "name": "small", **policy}
    assert api.get("/policies") == api.get("/policies/%2F") == [shown]
    assert api.get("/policies/%2F/small") == shown
    bigger = {**policy, "definition": {"max-length-bytes": 10**9, "max-age": "7D"}}
    assert api.call("PUT", "/policies/%2F/small", bigger).status_code == 204
    assert queue(api, "logs")["retention"]["max-age"] == "7D"

    # Create with other arguments than the stream was made with: still precondition failed
    async with await connect(b.host, b.port) as c:
        with pytest.raises(StreamletError) as refused:
            await c.create_stream("logs", {"max-length-bytes": "5"})
        assert refused.value.code == Code.PRECONDITION_FAILED

    b.restart()  # kept in the data directory, applied again at start
    assert api.get("/policies/%2F/small")["definition"] == bigger["definition"]
    assert queue(api, "logs")["retention"]["max-age"] == "7D"
    assert api.call("DELETE", "/policies/%2F/small").status_code == 204
    assert api.call("DELETE", "/policies/%2F/small").status_code == 404
    assert api.call("GET", "/policies/%2F/small").status_code == 404
    back = queue(api, "logs")
    assert back["policy"] is None and back["retention"]["max-length-bytes"] == 1_000_000_000
    assert back["retention"]["max-age"] is None


@pytest.mark.parametrize(("body", "reason"), [
    ({"pattern": ".*", "definition": {"message-ttl": 1}}, "are not recognised policy settings"),
    ({"pattern": ".*", "definition": {"max-age": "soon"}}, "is not a valid max-age"),
    ({"pattern": ".*", "definition": {}}, "no policy provided"),
    ({"definition": {"max-age": "1h"}}, "pattern is required"),
    ({"pattern": ".*", "apply-to": "nodes", "definition": {"max-age": "1h"}}, "apply-to"),
])
def test_bad_policies_are_400_with_the_reason(broker_factory: Factory, body: Any,
                                              reason: str) -> None:
    _, api = with_api(broker_factory)
    r = api.call("PUT", "/policies/%2F/p", body)
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert reason in r.json()["reason"]
    assert api.get("/policies") == []


def test_who_may_and_where(broker_factory: Factory, tmp_path: Path) -> None:
    config = tmp_path / "users.toml"
    config.write_text('[[users]]\nname = "guest"\npassword = "guest"\n'
                      '[[users]]\nname = "app"\npassword = "app"\n'
                      '[[permissions]]\nuser = "app"\nvhost = "/"\n'
                      'configure = ".*"\nwrite = ".*"\nread = ".*"\n')
    _, api = with_api(broker_factory, config)
    body = {"pattern": ".*", "definition": {"max-age": "1h"}}
    assert api.call("PUT", "/policies/%2F/p", body, auth=("app", "app")).status_code == 401
    assert api.call("GET", "/policies", auth=("app", "app")).status_code == 401
    assert api.call("PUT", "/policies/nowhere/p", body).status_code == 404
    assert api.call("POST", "/policies/%2F/p", body).status_code == 405


RABBITMQADMIN = shutil.which("rabbitmqadmin")


@pytest.mark.skipif(RABBITMQADMIN is None, reason="rabbitmqadmin is not installed")
async def test_rabbitmqadmin_declares_lists_and_deletes(broker_factory: Factory) -> None:
    b, api = with_api(broker_factory)
    assert RABBITMQADMIN is not None
    port = api.base.split(":")[2].split("/")[0]

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([RABBITMQADMIN, "-H", "127.0.0.1", "-P", port, "-u", "guest",
                               "-p", "guest", "-f", "tsv", *args], capture_output=True,
                              text=True, timeout=30)

    async with await connect(b.host, b.port) as c:
        await c.create_stream("events")
    done = admin("declare", "policy", "name=retain", "pattern=^ev",
                 'definition={"max-age": "1h", "max-length-bytes": 500000}',
                 "apply-to=streams", "priority=2")
    assert done.returncode == 0, done.stderr
    assert queue(api, "events")["retention"]["max-age"] == "1h"
    listed = admin("list", "policies", "name", "pattern", "apply-to", "priority").stdout
    assert listed.splitlines()[1:] == ["retain\t^ev\tstreams\t2"]
    bad = admin("declare", "policy", "name=x", "pattern=.*", 'definition={"ttl": 1}')
    assert bad.returncode != 0 and "not recognised policy settings" in bad.stdout + bad.stderr
    assert admin("delete", "policy", "name=retain").returncode == 0
    assert api.get("/policies") == []


def _members(tmp_path: Path, broker_factory: Factory) -> list[tuple[BrokerProcess, Api]]:
    ports = distinct_ports(3)
    peers = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    out = []
    for i in range(3):
        config = tmp_path / f"member{i}.toml"
        config.write_text(f"[cluster]\nmember = {i}\npeers = [{peers}]\n")
        out.append(with_api(broker_factory, config, ports[i]))
    return out


def _assign(brokers: list[BrokerProcess], stream: str) -> None:
    lead = brokers[0]
    for i, b in enumerate(brokers):
        with RawPeer(b.host, b.port) as peer:
            peer.handshake()
            answer: Any = peer.request(rf.Assign(1, stream, 1, Role.LEADER if i == 0 else
                                            Role.FOLLOWER, lead.host, lead.port, [0, 1, 2]),
                                  rf.AssignResponse)
            assert answer.code == Code.OK


async def test_every_member_of_a_replicated_stream_applies_it(tmp_path: Path,
                                                             broker_factory: Factory) -> None:
    members = _members(tmp_path, broker_factory)
    brokers, apis = [b for b, _ in members], [a for _, a in members]
    for b in brokers:
        async with await connect(b.host, b.port) as c:
            await c.create_stream("r", {"stream-max-segment-size-bytes": str(SEGMENT)})
    _assign(brokers, "r")
    sent = await fill(brokers[0], "r")

    def caught_up() -> bool:
        return all(queue(a, "r")["committed_offset"] == queue(apis[0], "r")["committed_offset"]
                   for a in apis)

    await eventually(caught_up, timeout=60, what="the followers hold every chunk")
    assert all(queue(a, "r")["segments"] >= 10 for a in apis)

    # set on a follower: sent to its peers, applied by each to its own copy
    small = {"pattern": "^r$", "definition": {"max-length-bytes": 3 * SEGMENT}}
    assert apis[1].call("PUT", "/policies/%2F/small", small).status_code == 201

    def applied(api: Api, size: int) -> bool:
        q = queue(api, "r")
        return q["retention"]["max-length-bytes"] == size and q["segments"] <= 4
    for api in apis:
        await eventually(lambda a=api: applied(a, 3 * SEGMENT), timeout=30,  # type: ignore[misc]
                         what="the policy applied on every member")
    end = queue(apis[2], "r")["committed_offset"] + 1
    kept = await read_all(brokers[2], "r", end)
    assert kept == sent[-len(kept):]

    # a member down while the policy changes takes the change when it is back
    brokers[2].stop()
    smaller = {"pattern": "^r$", "definition": {"max-length-bytes": 2 * SEGMENT}}
    assert apis[0].call("PUT", "/policies/%2F/small", smaller).status_code == 204
    await eventually(lambda: applied(apis[1], 2 * SEGMENT), timeout=30, what="member 1")
    brokers[2].start()
    await eventually(lambda: applied(apis[2], 2 * SEGMENT), timeout=60,
                     what="the restarted member converged")
    assert apis[2].get("/policies/%2F/small")["definition"] == smaller["definition"]

    # a deletion reaches every member too
    assert apis[2].call("DELETE", "/policies/%2F/small").status_code == 204
    for api in apis:
        await eventually(lambda a=api: a.get("/policies") == [], timeout=30,  # type: ignore[misc]
                         what="deleted everywhere")


async def test_a_member_without_a_policy_file_takes_its_peers_set_at_start(
        tmp_path: Path, broker_factory: Factory) -> None:
    """A new volume: no policies.json. The peers sent theirs long ago and have nothing pending,
    so only the member's own exchange at start can bring it the set."""
    brokers, apis = zip(*_members(tmp_path, broker_factory), strict=True)
    week = {"pattern": "^r$", "definition": {"max-age": "7D"}}
    assert apis[0].call("PUT", "/policies/%2F/week", week).status_code == 201
    for api in apis:
        await eventually(lambda a=api: a.get("/policies") != [], timeout=30,  # type: ignore[misc]
                         what="the policy on every member")
    brokers[2].stop()
    (brokers[2].data_dir / "policies.json").unlink()
    brokers[2].start()
    await eventually(lambda: apis[2].get("/policies") != [], timeout=60,
                     what="the member without a policy file took its peers' set")
    assert apis[2].get("/policies/%2F/week")["definition"] == week["definition"]


@pytest.mark.parametrize("text", ["{not json", '[{"vhost": "/", "name": "p"}]'])
def test_an_unreadable_policy_set_stops_serve_with_one_line(tmp_path: Path, text: str) -> None:
    data = tmp_path / "d"
    data.mkdir()
    (data / "policies.json").write_text(text)
    run = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--port",
                          str(free_port()), "--http-port", "0", "--metrics-port", "0",
                          "--data-dir", str(data)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "policies.json cannot be read" in lines[0], lines
