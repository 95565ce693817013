"""`streamlet policies set|list|delete` run as a user runs them, against a real broker's
management API (its port found from the stream port), and what they refuse."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from streamlet.cli.main import parse
from tests.cli.support import cli, conn
from tests.support.brokers import BrokerProcess, free_port
from tests.support.users import app_users

pytestmark = pytest.mark.process


def test_set_list_delete(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    config = tmp_path / "streamlet.toml"
    config.write_text(app_users())
    b = broker_factory(config=config, extra_args=["--http-port", str(free_port()),
                                                  "--metrics-port", "0"])
    cli(*conn(b), "produce", "orders", "--create", "--count", "3")
    out = cli(*conn(b), "policies", "set", "week", "^ord", "--max-age", "7D",
              "--max-length-bytes", "1000000", "--priority", "2").stdout.decode()
    assert out.strip() == "policy week set in virtual host /"
    listed = cli(*conn(b), "policies", "list").stdout.decode().splitlines()
    assert listed[0].split() == ["VHOST", "NAME", "PATTERN", "APPLY-TO", "PRIORITY", "DEFINITION"]
    assert listed[1].split(None, 5) == [
        "/", "week", "^ord", "streams", "2", '{"max-age": "7D", "max-length-bytes": 1000000}']
    as_json = [json.loads(x) for x in cli(*conn(b), "policies", "list", "--json",
                                          "--vhost", "/").stdout.decode().splitlines()]
    assert as_json == [{"vhost": "/", "name": "week", "pattern": "^ord", "apply-to": "streams",
                        "priority": 2, "definition": {"max-age": "7D",
                                                      "max-length-bytes": 1000000}}]
    streams = json.loads(cli(*conn(b), "streams", "list", "--json").stdout.decode()
                         .splitlines()[0])
    assert streams["policy"] == "week" and streams["retention"]["max-age"] == "7D"

    bad = cli(*conn(b), "policies", "set", "x", ".*", "--max-age", "a week", check=False)
    assert bad.returncode == 1 and b"is not a valid max-age" in bad.stderr
    app = cli(*conn(b), "--user", "app", "--password", "app-secret", "policies", "list",
              check=False)
    assert app.returncode == 1 and b"401" in app.stderr

    assert cli(*conn(b), "policies", "delete", "week").stdout.strip() == \
        b"policy week deleted from virtual host /"
    gone = cli(*conn(b), "policies", "delete", "week", check=False)
    assert gone.returncode == 1 and b"no policy 'week' in virtual host '/'" in gone.stderr
    assert cli(*conn(b), "policies", "list", "--json").stdout == b""


def test_set_needs_a_key() -> None:
    with pytest.raises(SystemExit) as exited:
        parse(["policies", "set", "p", ".*"])
    assert exited.value.code == 2
    args = parse(["policies", "set", "p", ".*", "--segment-size-bytes", "4096"])
    assert (args.segment_size_bytes, args.apply_to, args.priority) == (4096, "streams", 0)
