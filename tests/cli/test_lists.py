"""`streamlet connections|publishers|consumers|streams list` and `connections close`, run as a
user runs them, against a real broker's management API with a real consumer connected."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.support import cli, conn, start, stderr_line, wait_until
from tests.support.brokers import BrokerProcess, free_port
from tests.support.users import app_users

pytestmark = pytest.mark.process

CONFIG = app_users()


@pytest.fixture
def broker_http(broker_factory: Callable[..., BrokerProcess],
                tmp_path: Path) -> tuple[BrokerProcess, int]:
    config = tmp_path / "streamlet.toml"
    config.write_text(CONFIG)
    port = free_port()
    b = broker_factory(config=config, extra_args=["--http-port", str(port),
                                                  "--metrics-port", "0"])
    return b, port


@pytest.fixture
def reader(broker_http: tuple[BrokerProcess, int]) -> Iterator[subprocess.Popen[bytes]]:
    """`streamlet consume` left running on app-events (10 messages in it), as user app."""
    b, _ = broker_http
    cli(*conn(b), "--user", "app", "--password", "app-secret", "produce", "app-events",
        "--create", "--count", "10")
    cli(*conn(b), "produce", "audit", "--create", "--count", "3")
    p = start(*conn(b), "--user", "app", "--password", "app-secret", "consume", "app-events")
    yield p
    if p.poll() is None:
        p.kill()
        p.wait()


def lists(b: BrokerProcess, port: int, *args: str, user: str = "guest",
          password: str = "guest", check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return cli(*conn(b), "--user", user, "--password", password, *args, "--http-port", str(port),
               check=check)


def json_lines(out: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.decode().splitlines()]


def test_the_lists(broker_http: tuple[BrokerProcess, int],
                   reader: subprocess.Popen[bytes]) -> None:
    b, port = broker_http
    wait_until(lambda: json_lines(lists(b, port, "consumers", "list", "--json").stdout))
    [consumer] = json_lines(lists(b, port, "consumers", "list", "--json").stdout)
    assert consumer["queue"] == {"name": "app-events", "vhost": "/"}
    table = lists(b, port, "consumers", "list").stdout.decode().splitlines()
    assert table[0].split()[:3] == ["CONNECTION", "VHOST", "STREAM"]
    assert "app-events" in table[1] and len(table) == 2

    connections = json_lines(lists(b, port, "connections", "list", "--json").stdout)
    assert [c["user"] for c in connections] == ["app"]
    assert str(consumer["connection_details"]["name"]) in lists(  # type: ignore[index]
        b, port, "connections", "list").stdout.decode()
    assert lists(b, port, "publishers", "list", "--json").stdout == b""  # produce has ended

    streams = lists(b, port, "streams", "list").stdout.decode().splitlines()
    assert streams[0].split()[:3] == ["VHOST", "NAME", "MESSAGES"]
    assert [r.split()[1:3] for r in streams[1:]] == [["app-events", "10"], ["audit", "3"]]
    # the user app sees only the stream its permissions name, and only its own connections
    mine = lists(b, port, "streams", "list", "--json", user="app", password="app-secret")
    assert [s["name"] for s in json_lines(mine.stdout)] == ["app-events"]
    only = lists(b, port, "consumers", "list", "--stream", "audit", "--json", user="app",
                 password="app-secret", check=False)
    assert only.returncode == 1 and "401" in stderr_line(only.stderr)


def test_close_ends_the_consume_command(broker_http: tuple[BrokerProcess, int],
                                        reader: subprocess.Popen[bytes]) -> None:
    b, port = broker_http
    wait_until(lambda: json_lines(lists(b, port, "connections", "list", "--json").stdout))
    [victim] = json_lines(lists(b, port, "connections", "list", "--json").stdout)
    name = str(victim["name"])
    # an administrator (guest: no [[permissions]]) closes app's connection
    done = lists(b, port, "connections", "close", name)
    assert done.stdout.decode().strip() == f"closed {name}"
    _, err = reader.communicate(timeout=60)
    assert reader.returncode != 0
    assert "Closed via management API" in err.decode()
    again = lists(b, port, "connections", "close", name, check=False)
    assert again.returncode == 1
    assert stderr_line(again.stderr).startswith(f"streamlet: no connection {name!r} on ")


def test_wrong_password_and_no_api(broker_http: tuple[BrokerProcess, int],
                                   tmp_path: Path) -> None:
    b, port = broker_http
    bad = lists(b, port, "connections", "list", password="nope", check=False)
    assert bad.returncode == 1 and "401" in stderr_line(bad.stderr)
    secret = tmp_path / "pw"
    secret.write_text("guest\n")
    ok = cli(*conn(b), "--password-file", str(secret), "streams", "list", "--http-port",
             str(port))
    assert ok.stdout.decode().startswith("VHOST")
    env = cli(*conn(b), "streams", "list", "--http-port", str(port),
              env={"STREAMLET_USER": "app", "STREAMLET_PASSWORD": "app-secret"}, check=False)
    assert env.returncode == 0
    down = cli(*conn(b), "connections", "list", "--http-port", str(free_port()), check=False)
    assert down.returncode == 1 and "cannot reach the management API" in stderr_line(down.stderr)
