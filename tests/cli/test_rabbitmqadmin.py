"""rabbitmqadmin's `declare queue name=S queue_type=stream` and `delete queue name=S` against the
management API (PUT and DELETE /api/queues/{vhost}/{name}): a stream made (201, 204 when it
exists as declared) and deleted (204), with RabbitMQ's answers where it refuses: 400 and the
reason for what is not a stream or not what the stream is, 401 without the configure
permission. rabbitmqadmin itself when installed (Debian's rabbitmq-server ships it), else the
same requests by an HTTP client."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.brokers import BrokerProcess, distinct_ports
from tests.support.users import app_users

from .support import cli

RABBITMQADMIN = shutil.which("rabbitmqadmin")
USERS = app_users(write=".*", read=".*")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], int]]:
    root: Path = tmp_path_factory.mktemp("rabbitmqadmin")
    (root / "streamlet.toml").write_text(USERS)
    port, http = distinct_ports(2)
    b = BrokerProcess(root / "data", port=port, config=root / "streamlet.toml", extra_args=[
        "--http-port", str(http), "--metrics-port", "0"]).start()
    yield ["--port", str(port)], http
    b.stop()


def _info(c: list[str], name: str) -> dict[str, Any] | None:
    res = cli("streams", *c, "info", name, "--json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else None


def _put(http: int, name: str, doc: dict[str, Any],
         auth: tuple[str, str] = ("guest", "guest")) -> requests.Response:
    """What rabbitmqadmin's declare sends (its body: the properties as text, as it sends them)."""
    return requests.put(f"http://127.0.0.1:{http}/api/queues/%2F/{name}", json=doc, auth=auth,
                        timeout=10)


def _delete(http: int, name: str, auth: tuple[str, str] = ("guest", "guest")) -> int:
    return requests.delete(f"http://127.0.0.1:{http}/api/queues/%2F/{name}", auth=auth,
                           timeout=10).status_code


@pytest.mark.process
@pytest.mark.skipif(RABBITMQADMIN is None, reason="rabbitmqadmin is not installed")
def test_rabbitmqadmin_declares_and_deletes_a_stream(node: tuple[list[str], int]) -> None:
    c, http = node
    assert RABBITMQADMIN is not None

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(http), "-u", "guest",
                               "-p", "guest", *args], capture_output=True, text=True, timeout=30)

    made = admin("declare", "queue", "name=admin-made", "queue_type=stream",
                 'arguments={"x-max-age": "7D", "x-max-length-bytes": 1000000}')
    assert made.returncode == 0, made.stderr
    info = _info(c, "admin-made")
    assert info is not None
    assert info["max_age_ms"] == 7 * 86_400_000 and info["max_length_bytes"] == 1000000
    assert admin("declare", "queue", "name=admin-made", "queue_type=stream").returncode == 0
    classic = admin("declare", "queue", "name=admin-classic")
    assert classic.returncode != 0
    assert "streamlet holds streams only: declare it with the argument x-queue-type=stream" \
        in classic.stderr
    assert _info(c, "admin-classic") is None
    gone = admin("delete", "queue", "name=admin-made")
    assert gone.returncode == 0, gone.stderr
    assert _info(c, "admin-made") is None


@pytest.mark.process
def test_declare_as_rabbitmqadmin_sends_it(node: tuple[list[str], int]) -> None:
    c, http = node
    doc = {"auto_delete": "false", "durable": "true", "queue_type": "stream",
           "arguments": {"x-queue-type": "stream", "x-max-age": "1D"}}
    assert _put(http, "http-made", doc).status_code == 201
    info = _info(c, "http-made")
    assert info is not None and info["max_age_ms"] == 86_400_000
    assert _put(http, "http-made", doc).status_code == 204  # the same: nothing to do
    other = _put(http, "http-made", {"arguments": {"x-queue-type": "stream",
                                                   "x-max-age": "2D"}})
    assert other.status_code == 400
    assert other.json() == {"error": "bad_request", "reason": (
        "inequivalent arg 'x-max-age' for queue 'http-made' in vhost '/': received '2D', but "
        "the stream has max_age_ms 86400000")}
    assert _delete(http, "http-made") == 204
    assert _info(c, "http-made") is None
    assert _delete(http, "http-made") == 404


@pytest.mark.process
@pytest.mark.parametrize("doc, reason", [
    ({}, "streamlet holds streams only: declare it with the argument x-queue-type=stream "
         "(rabbitmqadmin: queue_type=stream)"),
    ({"arguments": {"x-queue-type": "quorum"}}, "streamlet holds streams only: declare it with "
                                                "the argument x-queue-type=stream "
                                                "(rabbitmqadmin: queue_type=stream)"),
    ({"durable": False, "arguments": {"x-queue-type": "stream"}},
     "invalid property 'durable' for queue 'refused': a stream is durable"),
    ({"arguments": {"x-queue-type": "stream", "x-max-age": "7d"}},
     "bad duration '7d': expected a number and one of Y M D h m s, e.g. 7D"),
])
def test_refusals_say_why(node: tuple[list[str], int], doc: dict[str, Any],
                          reason: str) -> None:
    c, http = node
    r = _put(http, "refused", doc)
    assert r.status_code == 400
    assert r.json() == {"error": "bad_request", "reason": reason}
    assert _info(c, "refused") is None


@pytest.mark.process
def test_the_configure_permission_is_needed(node: tuple[list[str], int]) -> None:
    c, http = node
    app = ("app", "app-secret")
    stream = {"arguments": {"x-queue-type": "stream"}}
    r = _put(http, "not-apps", stream, auth=app)
    assert r.status_code == 401 and r.json()["error"] == "not_authorised"
    assert _put(http, "app-own", stream, auth=app).status_code == 201
    assert _put(http, "not-apps", stream).status_code == 201
    assert _delete(http, "not-apps", auth=app) == 401
    assert _info(c, "not-apps") is not None
    assert _delete(http, "app-own", auth=app) == 204


@pytest.mark.parametrize("body, name, expected", [
    (b'{"arguments": {"x-queue-type": "stream"}}', "s", {}),
    (b'{"queue_type": "stream", "durable": "true", "auto_delete": "false"}', "s", {}),
    (b'{"arguments": {"x-queue-type": "stream", "x-max-length-bytes": 1000, "x-max-age": "7D",'
     b' "x-stream-max-segment-size-bytes": 5e6, "x-initial-cluster-size": 3}}', "s",
     {"max-length-bytes": "1000", "max-age": "7D", "stream-max-segment-size-bytes": "5000000",
      "initial-cluster-size": "3"}),
    (b"", "s", "streamlet holds streams only: declare it with the argument x-queue-type=stream "
               "(rabbitmqadmin: queue_type=stream)"),
    (b"[1]", "s", "the body is not a JSON object"),
    (b"{not json", "s", "the body is not JSON"),
    (b'{"arguments": 5}', "s", "arguments is not a JSON object"),
    (b'{"auto_delete": true, "arguments": {"x-queue-type": "stream"}}', "q",
     "invalid property 'auto_delete' for queue 'q': a stream is never auto_delete"),
    (b'{"exclusive": "yes", "arguments": {"x-queue-type": "stream"}}', "q",
     "exclusive must be true or false"),
    (b'{"arguments": {"x-queue-type": "stream", "x-max-priority": 5}}', "q",
     "a stream takes no argument 'x-max-priority' (it takes x-max-age, x-max-length-bytes, "
     "x-stream-max-segment-size-bytes, x-stream-filter-size-bytes, x-initial-cluster-size, "
     "x-queue-leader-locator)"),
    (b'{"arguments": {"x-queue-type": "stream", "x-max-age": [1]}}', "q",
     "argument 'x-max-age': [1] is not a number or text"),
])
def test_declaration(body: bytes, name: str, expected: dict[str, str] | str) -> None:
    from streamlet.broker.mgmt.declare import Refusal, declaration

    got = declaration(body, name)
    assert got == (Refusal(expected) if isinstance(expected, str) else expected)
