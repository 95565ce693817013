"""The management API's pure parts, by tables: HTTP heads, routing, Basic credentials and who
may see what, the list parameters, the JSON shapes, [listeners.http] and --http-port."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest

from streamlet.broker.access import AccessControl
from streamlet.broker.config.model import ConfigError, HttpListener
from streamlet.broker.http import Response, parse_head, render
from streamlet.broker.metrics.http import metrics_answer
from streamlet.broker.mgmt import query, views
from streamlet.broker.mgmt.identity import Identity, Refused, Visibility, authenticate
from streamlet.broker.mgmt.routes import NoRoute, Route, route
from streamlet.broker.mgmt.snapshot import ConnInfo, ConsumerInfo, StreamInfo
from streamlet.broker.protocols import load
from streamlet.cli.main import build_parser, parse
from streamlet.cli.mgmt import path
from streamlet.cli.tables import COLUMNS, table


@pytest.mark.parametrize(("head", "method", "segments", "query_", "auth"), [
    (b"GET /api/overview HTTP/1.1\r\nHost: x\r\n\r\n", "GET", ("api", "overview"), {}, None),
    (b"GET /api/queues/%2F/s%201?sort=name&columns=name,vhost HTTP/1.0\r\n"
     b"Authorization: Basic Zzpn\r\n\r\n", "GET", ("api", "queues", "/", "s 1"),
     {"sort": "name", "columns": "name,vhost"}, "Basic Zzpn"),
    (b"DELETE /api/connections/127.0.0.1%3A1%20-%3E%20127.0.0.1%3A5552 HTTP/1.1\r\n\r\n",
     "DELETE", ("api", "connections", "127.0.0.1:1 -> 127.0.0.1:5552"), {}, None),
    (b"GET /api/queues/ HTTP/1.1\r\n\r\n", "GET", ("api", "queues"), {}, None),
])
def test_heads_parse(head: bytes, method: str, segments: tuple[str, ...],
                     query_: dict[str, str], auth: str | None) -> None:
    request = parse_head(head)
    assert request is not None
    assert (request.method, request.segments, request.query) == (method, segments, query_)
    assert request.headers.get("authorization") == auth


@pytest.mark.parametrize("head", [b"GET /x\r\n\r\n", b"GET x HTTP/1.1\r\n\r\n",
                                  b"GET /x SPDY/3\r\n\r\n", b"GET /x HTTP/1.1\r\nno colon\r\n\r\n",
                                  b"GET /x HTTP/1.1\r\n :folded\r\n\r\n"])
def test_bad_heads_are_refused(head: bytes) -> None:
    assert parse_head(head) is None


def test_render_gives_length_and_close_and_head_only_drops_the_body() -> None:
    full = render(Response(401, b"{}", "application/json", (("WWW-Authenticate", "Basic"),)))
    assert full.startswith(b"HTTP/1.1 401 Unauthorized\r\n")
    assert b"Content-Length: 2\r\n" in full and b"Connection: close\r\n" in full
    assert full.endswith(b"WWW-Authenticate: Basic\r\n\r\n{}")
    assert render(Response(200, b"body"), head_only=True).endswith(b"\r\n\r\n")


@pytest.mark.parametrize(("head", "status"), [
    (b"GET /metrics HTTP/1.1\r\n\r\n", 200), (b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", 200),
    (b"GET / HTTP/1.1\r\n\r\n", 200), (b"POST /metrics HTTP/1.1\r\n\r\n", 405),
    (b"GET /api/overview HTTP/1.1\r\n\r\n", 404)])
def test_the_metrics_routing_is_unchanged(head: bytes, status: int) -> None:
    request = parse_head(head)
    assert request is not None
    assert metrics_answer(request, lambda: b"m 1\n", "text/plain").status == status


@pytest.mark.parametrize(("method", "path_", "expected"), [
    ("GET", "/api/overview", Route("overview", {})),
    ("HEAD", "/api/overview", Route("overview", {})),
    ("GET", "/api/whoami", Route("whoami", {})),
    ("GET", "/api/vhosts", Route("vhosts", {})),
    ("GET", "/api/vhosts/%2F", Route("vhost", {"vhost": "/"})),
    ("GET", "/api/vhosts/%2F/connections", Route("connections", {"vhost": "/"})),
    ("GET", "/api/connections", Route("connections", {})),
    ("GET", "/api/connections/a%20-%3E%20b", Route("connection", {"name": "a -> b"})),
    ("DELETE", "/api/connections/c", Route("close", {"name": "c"})),
    ("GET", "/api/stream/connections", Route("stream_connections", {})),
    ("GET", "/api/queues", Route("queues", {})),
    ("GET", "/api/queues/v", Route("queues", {"vhost": "v"})),
    ("GET", "/api/queues/%2F/orders", Route("queue", {"vhost": "/", "name": "orders"})),
    ("GET", "/api/stream/publishers", Route("publishers", {})),
    ("GET", "/api/stream/publishers/%2F", Route("publishers", {"vhost": "/"})),
    ("GET", "/api/stream/publishers/%2F/s", Route("publishers", {"vhost": "/", "stream": "s"})),
    ("GET", "/api/stream/consumers/%2F/s", Route("consumers", {"vhost": "/", "stream": "s"})),
    ("PUT", "/api/queues/%2F/s", Route("declare", {"vhost": "/", "name": "s"})),
    ("DELETE", "/api/queues/%2F/s", Route("delete", {"vhost": "/", "name": "s"})),
    ("POST", "/api/queues/%2F/s", NoRoute(405, ("DELETE", "GET", "HEAD", "PUT"))),
    ("POST", "/api/connections/c", NoRoute(405, ("DELETE", "GET", "HEAD"))),
    ("PUT", "/api/overview", NoRoute(405, ("GET", "HEAD"))),
    ("GET", "/api/exchanges", NoRoute(404)),
    ("GET", "/api/queues/%2F/s/bindings", NoRoute(404)),
    ("GET", "/", NoRoute(404)),
])
def test_routes(method: str, path_: str, expected: Route | NoRoute) -> None:
    request = parse_head(f"{method} {path_} HTTP/1.1\r\n\r\n".encode())
    assert request is not None
    assert route(method, request.segments) == expected


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def config(tmp_path: Path) -> Any:
    path_ = tmp_path / "c.toml"
    path_.write_text('[[users]]\nname = "guest"\npassword = "guest"\n'
                     '[[users]]\nname = "admin"\npassword = "pw"\n'
                     '[[users]]\nname = "app"\npassword = "apppw"\n'
                     '[[vhosts]]\nname = "/"\n[[vhosts]]\nname = "other"\n'
                     '[[permissions]]\nuser = "app"\nvhost = "/"\nconfigure = ""\n'
                     'write = "^app-"\nread = "^app-"\n')
    return load(path_)


@pytest.mark.parametrize(("header", "peer", "expected"), [
    (basic("admin", "pw"), "10.0.0.1", Identity("admin", True)),
    (basic("app", "apppw"), "127.0.0.1", Identity("app", False)),
    (basic("guest", "guest"), "127.0.0.1", Identity("guest", True)),
    (basic("guest", "guest"), "10.0.0.1", Refused("User can only log in via localhost")),
    (basic("admin", "wrong"), "127.0.0.1", Refused("Login failed")),
    (basic("nobody", "pw"), "127.0.0.1", Refused("Login failed")),
    (None, "127.0.0.1", Refused("Not_Authorized")),
    ("Bearer abc", "127.0.0.1", Refused("Not_Authorized")),
    ("Basic !!!", "127.0.0.1", Refused("Not_Authorized")),
    ("Basic " + base64.b64encode(b"nocolon").decode(), "127.0.0.1", Refused("Not_Authorized")),
])
def test_authenticate(config: Any, header: str | None, peer: str,
                      expected: Identity | Refused) -> None:
    assert authenticate(config, header, peer) == expected


@pytest.mark.parametrize(("who", "vhost", "stream", "owner", "sees"), [
    (Identity("admin", True), "other", "anything", "app", (True, True, True)),
    (Identity("app", False), "/", "app-orders", "app", (True, True, True)),
    (Identity("app", False), "/", "billing", "admin", (True, False, False)),
    (Identity("app", False), "other", "app-orders", "app", (False, False, True)),
])
def test_visibility(config: Any, who: Identity, vhost: str, stream: str, owner: str,
                    sees: tuple[bool, bool, bool]) -> None:
    see = Visibility(who, AccessControl(config))
    assert (see.vhost(vhost), see.stream(vhost, stream), see.owner(owner)) == sees


ITEMS: list[dict[str, Any]] = [{"name": "b", "n": 2, "q": {"v": "x"}}, {"name": "a", "n": 10, "q": {"v": "y"}},
         {"name": "c", "q": {"v": "z"}}]


@pytest.mark.parametrize(("params", "expected"), [
    ({}, ITEMS),
    ({"sort": "name"}, [ITEMS[1], ITEMS[0], ITEMS[2]]),
    ({"sort": "n"}, [ITEMS[2], ITEMS[0], ITEMS[1]]),  # missing first, then by number
    ({"sort": "q.v", "sort_reverse": "true"}, [ITEMS[2], ITEMS[1], ITEMS[0]]),
    ({"columns": "name"}, [{"name": "b"}, {"name": "a"}, {"name": "c"}]),
    ({"columns": "q.v,n"}, [{"q": {"v": "x"}, "n": 2}, {"q": {"v": "y"}, "n": 10},
                            {"q": {"v": "z"}}]),
])
def test_list_parameters(params: dict[str, str], expected: list[dict[str, Any]]) -> None:
    assert query.apply(ITEMS, params) == expected


@pytest.mark.parametrize(("ms", "text"), [(604800000, "7D"), (3600_000, "1h"), (90_000, "90s"),
                                          (31536000000, "1Y"), (1500, "1s")])
def test_age_text(ms: int, text: str) -> None:
    assert views.age_text(ms) == text


CONN = ConnInfo("127.0.0.1:40000 -> 127.0.0.1:5552", "rabbitmq", "app", "/", "running",
                "127.0.0.1", 5552, "127.0.0.1", 40000, False, 1048576, 60,
                {"connection_name": "orders-app"}, 1, 2)


def stream_info(**kw: Any) -> StreamInfo:
    base: dict[str, Any] = dict(
        vhost="/", name="orders", max_age_ms=604800000, max_length_bytes=None,
        max_segment_size_bytes=500000000, filter_size=16, messages=5, size_bytes=700,
        segments=1, first_offset=0, committed_offset=4, publishers=1, consumers=2,
        writable=True, leader="b-0:5552", members=("b-0:5552", "b-1:5552"), replicated=True,
        messages_in=5, messages_out=9, confirmed=5)
    return StreamInfo(**{**base, **kw})


def test_connection_shape_uses_rabbitmqs_names() -> None:
    doc = views.connection(CONN, "n")
    assert {k: doc[k] for k in ("name", "user", "vhost", "protocol", "peer_host", "peer_port",
                                "frame_max", "timeout", "ssl", "state")} == {
        "name": CONN.name, "user": "app", "vhost": "/", "protocol": "stream",
        "peer_host": "127.0.0.1", "peer_port": 40000, "frame_max": 1048576, "timeout": 60,
        "ssl": False, "state": "running"}
    assert doc["client_properties"]["connection_name"] == "orders-app"


@pytest.mark.parametrize(("kw", "arguments"), [
    ({}, {"x-queue-type": "stream", "x-max-age": "7D",
          "x-stream-max-segment-size-bytes": 500000000}),
    ({"max_age_ms": None, "max_length_bytes": 10**9, "filter_size": 32},
     {"x-queue-type": "stream", "x-max-length-bytes": 10**9,
      "x-stream-max-segment-size-bytes": 500000000, "x-stream-filter-size-bytes": 32}),
])
def test_queue_shape(kw: dict[str, Any], arguments: dict[str, Any]) -> None:
    doc = views.queue(stream_info(**kw), "n")
    assert doc["type"] == "stream" and doc["durable"] is True
    assert doc["arguments"] == arguments
    assert (doc["messages"], doc["consumers"], doc["leader"], doc["members"]) == (
        5, 2, "b-0:5552", ["b-0:5552", "b-1:5552"])
    assert doc["message_stats"] == {"publish": 5, "deliver_get": 9, "confirm": 5}


@pytest.mark.parametrize(("single", "active", "status"), [
    (False, True, "up"), (True, True, "single_active"), (True, False, "waiting")])
def test_consumer_shape(single: bool, active: bool, status: str) -> None:
    doc = views.consumer(ConsumerInfo(CONN, "/", "orders", 3, 10, 42, 7, {"name": "g"}, active,
                                      single), "n")
    assert doc["queue"] == {"name": "orders", "vhost": "/"}
    assert doc["connection_details"]["name"] == CONN.name
    assert doc["connection_details"]["user"] == "app"
    assert (doc["subscription_id"], doc["credits"], doc["offset"], doc["offset_lag"]) == (
        3, 10, 42, 7)
    assert doc["activity_status"] == status


def test_overview_totals() -> None:
    doc = views.overview(cluster_name="c", node="n", version="1", rabbitmq_version="3.13.0",
                         connections=2, streams=[stream_info(), stream_info(messages=3)],
                         consumers=4, publishers=1, listeners=[], port=15672)
    assert doc["object_totals"]["queues"] == 2 and doc["object_totals"]["connections"] == 2
    assert doc["queue_totals"]["messages"] == 8


# --- [listeners.http] and serve --http-port --------------------------------------------------

def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


def test_http_listener_defaults_and_flags(tmp_path: Path) -> None:
    assert load().http == HttpListener(15672, None, required=False)
    cfg = write(tmp_path, '[listeners.http]\nport = 9672\nhost = "0.0.0.0"\n')
    assert load(cfg).http == HttpListener(9672, "0.0.0.0", True)
    assert all(lst.protocol != "http" for lst in load(cfg).listeners)
    assert load(cfg, http_port=0).http is None
    assert load(cfg, http_port=9000).http == HttpListener(9000, "0.0.0.0", True)
    assert load(write(tmp_path, "[listeners.http]\nenabled = false\n")).http is None


TLS = '[tls]\nport = 5551\ncertfile = "c.pem"\nkeyfile = "k.pem"\n'


@pytest.mark.parametrize(("text", "plain", "tls"), [
    pytest.param("", 15672, None, id="nothing said: HTTP on 15672"),
    pytest.param(TLS, 15672, None, id="[tls] alone: HTTP only, as before"),
    pytest.param(TLS + "[listeners.http]\ntls_port = 15671\n", None, 15671,
                 id="tls_port alone: HTTPS only, as RabbitMQ's ssl listener alone"),
    pytest.param(TLS + "[listeners.http]\ntls_port = 15671\nport = 15672\n", 15672, 15671,
                 id="both said: both"),
    pytest.param(TLS + "[listeners.http]\ntls_port = 15671\nport = 0\n", None, 15671,
                 id="port 0 beside tls_port: HTTPS only"),
    pytest.param(TLS + "[listeners.http]\ntls_port = 0\n", 15672, None,
                 id="tls_port 0: HTTP on the default port"),
])
def test_http_listener_over_tls(tmp_path: Path, text: str, plain: int | None,
                                tls: int | None) -> None:
    http = load(write(tmp_path, text)).http
    assert http is not None and (http.port, http.tls_port) == (plain, tls)


def test_http_port_flag_beside_tls_port(tmp_path: Path) -> None:
    cfg = write(tmp_path, TLS + "[listeners.http]\ntls_port = 15671\n")
    assert load(cfg, http_port=9000).http == HttpListener(9000, None, True, 15671)
    assert load(cfg, http_port=0).http is None  # the flag's 0 turns the whole API off


@pytest.mark.parametrize(("text", "message"), [
    ("[listeners.http]\nport = 70000\n", "listeners.http.port must be in 1..65535"),
    ("[listeners.http]\npath = \"/x\"\n", "unknown key(s) in [listeners.http]: path"),
    (TLS + "[listeners.http]\ntls_port = 70000\n", "listeners.http.tls_port must be in 1..65535"),
    ("[listeners.http]\ntls_port = 15671\n", "[listeners.http] tls_port needs a [tls] section"),
    (TLS + "[listeners.http]\ntls_port = 9000\nport = 9000\n",
     "[listeners.http] port and tls_port are both 9000"),
])
def test_bad_http_listener(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(write(tmp_path, text))


# --- the CLI's side: which endpoint, which table ------------------------------------------------

@pytest.mark.parametrize(("argv", "endpoint"), [
    (["connections", "list"], "/api/connections"),
    (["connections", "list", "--vhost", "/"], "/api/vhosts/%2F/connections"),
    (["publishers", "list"], "/api/stream/publishers"),
    (["publishers", "list", "--vhost", "v"], "/api/stream/publishers/v"),
    (["consumers", "list", "--stream", "s"], "/api/stream/consumers/%2F/s"),
    (["streams", "list"], "/api/queues"),
    (["--vhost", "/", "streams", "list"], "/api/queues/%2F"),
])
def test_cli_endpoints(argv: list[str], endpoint: str) -> None:
    assert path(parse(argv)) == endpoint


def test_cli_options() -> None:
    args = parse(["consumers", "list", "--http-port", "9672", "--user", "u", "--json"])
    assert (args.http_port, args.user, args.json) == (9672, "u", True)
    assert parse(["connections", "list"]).http_port is None  # found from the broker (mgmt.py)
    assert parse(["connections", "list", "--tls", "--ca-cert", "ca.pem"]).tls  # HTTPS
    with pytest.raises(SystemExit):
        parse(["connections", "list", "--ca-cert", "ca.pem"])  # only with --tls
    with pytest.raises(SystemExit):
        parse(["connections", "list", "--tls", "--sasl-mechanism", "EXTERNAL"])


def test_table() -> None:
    lines = table([{"name": "a -> b", "user": "u", "vhost": "/", "protocol": "stream",
                    "state": "running", "publishers": 1, "consumers": 0,
                    "client_properties": {"product": "rstream"}}], COLUMNS["connections"])
    assert lines[0].split() == ["NAME", "USER", "VHOST", "PROTOCOL", "STATE", "PUBLISHERS",
                                "CONSUMERS", "CLIENT"]
    assert lines[1].split() == ["a", "->", "b", "u", "/", "stream", "running", "1", "0",
                                "rstream"]


def test_serve_help_names_the_http_port(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    out = capsys.readouterr().out
    assert "--http-port P" in out and "15672" in out
