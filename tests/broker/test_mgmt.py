"""The management HTTP API against a real broker process: the `requests` calls (and
`rabbitmqadmin` commands) a RabbitMQ user makes, with rstream publishers and consumers
connected."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from rstream import Consumer as RConsumer
from rstream import ConsumerOffsetSpecification, OffsetType, RawMessage
from rstream import Producer as RProducer

from tests.support.brokers import BrokerProcess, free_port, holding
from tests.support.users import APP, app_users
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

USERS = app_users(more='[[vhosts]]\nname = "/"\n[[vhosts]]\nname = "private"')
GUEST = ("guest", "guest")


class Api:
    """The management API as a script sees it: a base URL and Basic credentials."""

    def __init__(self, port: int, auth: tuple[str, str] = GUEST) -> None:
        self.base = f"http://127.0.0.1:{port}/api"
        self.auth = auth

    def get(self, path: str, **params: str) -> Any:
        r = requests.get(self.base + path, auth=self.auth, params=params, timeout=10)
        assert r.status_code == 200, (path, r.status_code, r.text)
        assert r.headers["Content-Type"] == "application/json"
        return r.json()

    def status(self, method: str, path: str, auth: tuple[str, str] | None = None) -> int:
        return requests.request(method, self.base + path, auth=auth or self.auth,
                                timeout=10).status_code


def mgmt_broker(broker_factory: Callable[..., BrokerProcess],
                tmp_path: Path) -> tuple[BrokerProcess, int]:
    config = tmp_path / "streamlet.toml"
    config.write_text(USERS)
    port = free_port()
    b = broker_factory(config=config, extra_args=["--http-port", str(port),
                                                  "--metrics-port", "0"])
    return b, port


def producer(b: BrokerProcess, auth: tuple[str, str] = GUEST, **kw: Any) -> RProducer:
    return RProducer(b.host, b.port, username=auth[0], password=auth[1], **kw)


def consumer(b: BrokerProcess, auth: tuple[str, str] = GUEST, **kw: Any) -> RConsumer:
    return RConsumer(b.host, b.port, username=auth[0], password=auth[1], **kw)


async def test_lists_match_what_is_connected(broker_factory: Callable[..., BrokerProcess],
                                             tmp_path: Path) -> None:
    b, port = mgmt_broker(broker_factory, tmp_path)
    api = Api(port)
    async with producer(b, connection_name="orders-writer") as p:
        await p.create_stream("orders", arguments={"max-age": "7D"})
        await p.send_batch("orders", [RawMessage(b"m%d" % i) for i in range(100)])
        got = asyncio.Event()
        async with consumer(b, connection_name="orders-reader") as c:
            await c.subscribe("orders", lambda m, ctx: got.set(), properties={"tag": "billing"},
                              offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
            await asyncio.wait_for(got.wait(), 30)

            publishers = api.get("/stream/publishers")
            assert [(x["queue"], x["connection_details"]["user"]) for x in publishers] == [
                ({"name": "orders", "vhost": "/"}, "guest")]
            consumers = api.get("/stream/consumers/%2F/orders")
            assert len(consumers) == 1
            assert consumers[0]["queue"] == {"name": "orders", "vhost": "/"}
            assert consumers[0]["properties"].get("tag") == "billing"
            assert consumers[0]["activity_status"] == "up"
            assert api.get("/stream/consumers/%2F") == consumers

            names = {x["client_properties"].get("connection_name"): x
                     for x in api.get("/connections")}
            assert {"orders-writer", "orders-reader"} <= set(names)
            writer = names["orders-writer"]
            assert writer["protocol"] == "stream" and writer["user"] == "guest"
            assert writer["name"] == publishers[0]["connection_details"]["name"]
            assert writer["publishers"] == 1
            assert names["orders-reader"]["name"] == consumers[0]["connection_details"]["name"]
            assert api.get(f"/connections/{requests.utils.quote(writer['name'], safe='')}"
                           )["name"] == writer["name"]

            queue = api.get("/queues/%2F/orders")
            assert (queue["type"], queue["messages"], queue["consumers"]) == ("stream", 100, 1)
            assert queue["arguments"]["x-max-age"] == "7D"
            assert queue["committed_offset"] == 99 and queue["size_bytes"] > 100 * 2
            assert [q["name"] for q in api.get("/queues")] == ["orders"]
            overview = api.get("/overview")
            assert overview["object_totals"]["queues"] == 1
            assert overview["object_totals"]["consumers"] == 1
            assert overview["queue_totals"]["messages"] == 100
            assert api.get("/whoami") == {"name": "guest", "tags": ["administrator"]}
            assert [v["name"] for v in api.get("/vhosts")] == ["/", "private"]
            # RabbitMQ's list parameters
            assert api.get("/connections", columns="name,user", sort="name") == sorted(
                ({"name": x["name"], "user": x["user"]} for x in names.values()),
                key=lambda x: x["name"])
    await eventually(lambda: api.get("/stream/publishers") == [], what="publisher gone")
    await eventually(lambda: api.get("/stream/consumers") == [], what="consumer gone")


async def test_closing_a_connection_closes_the_clients(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    b, port = mgmt_broker(broker_factory, tmp_path)
    api = Api(port)
    closed: list[object] = []

    async def on_close(info: object) -> None:
        closed.append(info)

    async with producer(b, connection_name="doomed", on_close_handler=on_close) as p:
        await p.create_stream("s")
        await p.send_batch("s", [RawMessage(b"x")])
        doomed = next(x["name"] for x in api.get("/connections")
                      if x["client_properties"].get("connection_name") == "doomed"
                      and x["publishers"] == 1)
        quoted = requests.utils.quote(doomed, safe="")
        r = requests.delete(f"{api.base}/connections/{quoted}", auth=GUEST, timeout=10,
                            headers={"X-Reason": "maintenance"})
        assert r.status_code == 204
        await eventually(lambda: closed, what="rstream told of the close")
        await eventually(lambda: doomed not in {x["name"] for x in api.get("/connections")},
                         what="connection gone from the list")
        assert api.status("DELETE", f"/connections/{quoted}") == 404
    assert b.alive()


async def test_permissions_filter_and_refuse(broker_factory: Callable[..., BrokerProcess],
                                             tmp_path: Path) -> None:
    b, port = mgmt_broker(broker_factory, tmp_path)
    admin, app = Api(port), Api(port, APP)
    async with producer(b) as p, producer(b, APP, connection_name="app-conn") as ap:
        await p.create_stream("billing")
        await ap.create_stream("app-orders")
        await p.send_batch("billing", [RawMessage(b"x")])
        await ap.send_batch("app-orders", [RawMessage(b"y")])

        assert sorted(q["name"] for q in admin.get("/queues")) == ["app-orders", "billing"]
        assert [q["name"] for q in app.get("/queues")] == ["app-orders"]
        assert [q["name"] for q in app.get("/queues/%2F")] == ["app-orders"]
        assert app.get("/whoami") == {"name": "app", "tags": ["management"]}
        assert [v["name"] for v in app.get("/vhosts")] == ["/"]
        assert {c["user"] for c in app.get("/connections")} == {"app"}
        assert {c["user"] for c in admin.get("/connections")} == {"app", "guest"}
        assert [x["queue"]["name"] for x in app.get("/stream/publishers")] == ["app-orders"]
        assert app.get("/overview")["object_totals"]["queues"] == 1

        guest_conn = next(c["name"] for c in admin.get("/connections") if c["user"] == "guest")
        quoted = requests.utils.quote(guest_conn, safe="")
        assert app.status("DELETE", f"/connections/{quoted}") == 401  # not its own
        assert app.status("GET", f"/connections/{quoted}") == 401
        assert guest_conn in {c["name"] for c in admin.get("/connections")}  # still open
        assert app.status("GET", "/queues/%2F/billing") == 401
        assert app.status("GET", "/queues/private") == 401
        assert admin.status("GET", "/queues/%2F/nope") == 404
        assert admin.status("GET", "/queues/nope") == 404

    r = requests.get(admin.base + "/overview", auth=("guest", "wrong"), timeout=10)
    assert r.status_code == 401 and r.json()["error"] == "not_authorized"
    assert r.headers["WWW-Authenticate"].startswith("Basic")
    assert requests.get(admin.base + "/overview", timeout=10).status_code == 401
    assert admin.status("POST", "/queues/%2F/billing") == 405
    assert admin.status("GET", "/exchanges") == 404


RABBITMQADMIN = shutil.which("rabbitmqadmin")


@pytest.mark.skipif(RABBITMQADMIN is None, reason="rabbitmqadmin is not installed "
                    "(Debian's rabbitmq-server ships it)")
async def test_rabbitmqadmin(broker_factory: Callable[..., BrokerProcess],
                             tmp_path: Path) -> None:
    b, port = mgmt_broker(broker_factory, tmp_path)
    assert RABBITMQADMIN is not None

    def admin(*args: str) -> str:
        out = subprocess.run([RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(port), "-u", "guest",
                              "-p", "guest", "-f", "tsv", *args], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout

    async with producer(b, connection_name="admin-target") as p:
        await p.create_stream("events")
        await p.send_batch("events", [RawMessage(b"e") for _ in range(7)])
        assert admin("list", "queues").splitlines()[1:] == ["events\t7"]
        assert admin("list", "queues", "name", "type", "messages").splitlines()[1:] == [
            "events\tstream\t7"]
        overview = admin("show", "overview").splitlines()
        assert overview[1].split("\t")[1:] == ["streamlet", "7", "1"]
        names = admin("list", "connections", "name", "user").splitlines()[1:]
        assert len(names) >= 1 and all(n.endswith("\tguest") for n in names)
        target = next(x["name"] for x in Api(port).get("/connections")
                      if x["client_properties"].get("connection_name") == "admin-target"
                      and x["publishers"] == 1)
        admin("close", "connection", f"name={target}")
        await eventually(lambda: target not in {x["name"] for x in Api(port).get("/connections")},
                         what="closed by rabbitmqadmin")


def test_the_default_port_taken_is_skipped(broker_factory: Callable[..., BrokerProcess]) -> None:
    with holding(15672):
        b = broker_factory(extra_args=["--metrics-port", "0"])
        assert eventually_sync(lambda: "no management API: cannot listen on 127.0.0.1:15672"
                               in b.log_text())
        assert b.alive()


def eventually_sync(check: Callable[[], bool], timeout: float = 30) -> bool:
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_http_port_zero_turns_it_off(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(extra_args=["--http-port", "0", "--metrics-port", "0"])
    assert eventually_sync(lambda: "no management API (turned off)" in b.log_text())
