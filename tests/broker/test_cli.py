"""The `streamlet` command as a user runs it, against a real broker."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.support import wait_until
from tests.support.brokers import BrokerProcess, free_port

pytestmark = pytest.mark.process


def cli(*args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "streamlet", *args], input=stdin,
                          capture_output=True, timeout=60, check=check)


def conn(b: BrokerProcess) -> list[str]:
    return ["--host", b.host, "--port", str(b.port)]


def test_help_lists_every_command() -> None:
    out = cli("--help").stdout.decode()
    for command in ("serve", "produce", "consume", "streams", "cluster"):
        assert command in out
    serve = cli("serve", "--help").stdout.decode()
    for flag in ("--host", "--port", "--data-dir", "--config"):
        assert flag in serve


def test_produce_consume_streams(shared_broker: BrokerProcess) -> None:
    c = conn(shared_broker)
    assert cli("streams", *c, "create", "cli-demo", "--max-age", "1D").returncode == 0
    cli("produce", *c, "cli-demo", stdin=b"one\ntwo\nthree\n")
    out = cli("consume", *c, "cli-demo", "--count", "3").stdout.decode()
    assert out.splitlines() == ["0\tone", "1\ttwo", "2\tthree"]
    out = cli("consume", *c, "cli-demo", "--offset", "1", "--count", "1").stdout.decode()
    assert out == "1\ttwo\n"
    info = cli("streams", *c, "info", "cli-demo", "nope", check=False)
    assert info.returncode == 1 and b"nope: no such stream" in info.stderr
    assert "offsets: 0..2" in info.stdout.decode() and "max-age 1D" in info.stdout.decode()
    again = cli("streams", *c, "create", "cli-demo", check=False)
    assert again.returncode == 1 and b"STREAM_ALREADY_EXISTS" in again.stderr
    assert cli("streams", *c, "delete", "cli-demo").returncode == 0


def test_clear_errors(tmp_path: Path) -> None:
    down = cli("consume", "--port", str(free_port()), "x", check=False)
    assert down.returncode == 1 and b"cannot connect" in down.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nport = 'many'\n")
    res = cli("serve", "--config", str(bad), "--data-dir", str(tmp_path / "d"), check=False)
    assert res.returncode == 2 and b"server.port must be an integer" in res.stderr


def test_config_file_sets_users_and_retention(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text(
        '[server]\nadvertised_host = "broker-0.example"\n'
        '[retention]\nmax_age = "2h"\n'
        '[[users]]\nname = "app"\npassword = "s3cret"\n'
    )
    b = BrokerProcess(tmp_path / "data", config=cfg).start()
    try:
        guest = cli("streams", *conn(b), "create", "x", check=False)
        assert guest.returncode == 1 and b"AUTHENTICATION_FAILURE" in guest.stderr
        ok = cli("streams", *conn(b), "--user", "app", "--password", "s3cret", "create", "x")
        assert ok.returncode == 0
        meta = (tmp_path / "data" / "streams" / "x" / "stream.json").read_text()
        assert '"max_age_ms": 7200000' in meta
    finally:
        b.stop()


def test_cli_follows_a_stream_to_the_broker_that_holds_it(tmp_path: Path) -> None:
    """With a stream directory, `produce`/`consume` given any broker reach the stream's own."""
    directory = tmp_path / "streams.json"
    directory.write_text("{}")
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(f'[cluster]\ndirectory_file = "{directory}"\n')
    a = BrokerProcess(tmp_path / "a" / "data", config=cfg).start()
    b = BrokerProcess(tmp_path / "b" / "data", config=cfg).start()
    try:
        cli("streams", *conn(b), "create", "far-away")
        directory.write_text(json.dumps({"streams": {"far-away": f"127.0.0.1:{b.port}"}}))
        # a broker re-reads the directory file within about a second: wait until a has
        wait_until(lambda: cli("streams", *conn(a), "info", "far-away", check=False).returncode == 0,
                   timeout=60)
        sent = cli("produce", *conn(a), "far-away", stdin=b"x\ny\n")
        assert f"far-away is on 127.0.0.1:{b.port}".encode() in sent.stderr
        assert cli("consume", *conn(a), "far-away", "--count", "2").stdout == b"0\tx\n1\ty\n"
        info = cli("streams", *conn(a), "info", "far-away").stdout.decode()
        # asked of a broker that does not hold it: the holder's stats, fetched from it
        assert f"leader: 127.0.0.1:{b.port}" in info and "messages: 2" in info
        assert "held by" not in info
        local = cli("streams", *conn(b), "info", "far-away").stdout.decode()
        assert "offsets: 0..1" in local and "messages: 2" in local
    finally:
        a.stop()
        b.stop()


def test_connection_options_before_or_after_any_command_word(shared_broker: BrokerProcess) -> None:
    """`--host --port --user --password --vhost` work at every level; the last one given wins,
    and a level where they are not given does not put the default back."""
    c = conn(shared_broker)
    wrong_port = ["--port", str(free_port())]  # nothing listens there
    assert cli("streams", "create", "anywhere-1", *c).stdout == b"created anywhere-1\n"  # after the command
    assert cli(*c, "streams", "create", "anywhere-2").returncode == 0  # before the command
    assert cli("streams", *c, "create", "anywhere-3").returncode == 0  # between the words
    assert cli(*wrong_port, "streams", "create", "anywhere-4", *c).returncode == 0  # last wins
    refused = cli(*c, "streams", "create", "anywhere-5", *wrong_port, check=False)
    assert refused.returncode == 1 and b"cannot connect" in refused.stderr
    cli("produce", "anywhere-1", *c, "--vhost", "/", stdin=b"a\nb\n")
    cli(*c, "produce", "anywhere-1", stdin=b"c\n")
    out = cli("--host", shared_broker.host, "consume", "anywhere-1", "--count", "3",
              "--port", str(shared_broker.port)).stdout
    assert out == b"0\ta\n1\tb\n2\tc\n"
    info = cli("streams", "info", "anywhere-1", "anywhere-2", *c).stdout.decode()
    assert info.count("  offsets: ") == 2
    bad = cli("streams", "info", "anywhere-1", *c, "--user", "guest", "--password", "nope",
              check=False)
    assert bad.returncode == 1 and b"AUTHENTICATION_FAILURE" in bad.stderr
    vhost = cli(*c, "streams", "info", "anywhere-1", "--vhost", "no-such-vhost", check=False)
    assert vhost.returncode == 1 and b"VIRTUAL_HOST_ACCESS_FAILURE" in vhost.stderr
    assert cli("streams", "create-super", "anywhere-s", "--partitions", "2", *c).returncode == 0
    assert cli("streams", "partitions", "anywhere-s", *c).stdout == b"anywhere-s-0\nanywhere-s-1\n"
    assert cli("streams", "delete-super", "anywhere-s", *c).returncode == 0
    for n in range(1, 5):
        assert cli("streams", "delete", f"anywhere-{n}", *c).returncode == 0
    # serve takes --host/--port before its name too, but no client credentials
    serve = cli("--user", "x", "serve", check=False)
    assert serve.returncode == 2 and b"not an option of serve" in serve.stderr


_CONNECTION_FLAGS = ("--host", "--port", "--user", "--password", "--vhost")
_CLIENT_COMMANDS = [["produce"], ["consume"], ["streams"]] + [
    ["streams", action] for action in
    ("create", "delete", "info", "create-super", "delete-super", "partitions")]


def test_help_is_true_at_every_level() -> None:
    """Every level's --help lists the connection options it accepts, and every flag the
    README's command table names is in the help of the command its row is about."""
    for words in [[], *_CLIENT_COMMANDS]:
        text = cli(*words, "--help").stdout.decode()
        assert all(flag in text for flag in _CONNECTION_FLAGS), (words, text)
    serve = cli("serve", "--help").stdout.decode()
    assert "--port" in serve and "--user" not in serve
    table = (Path(__file__).parents[2] / "README.md").read_text()
    rows = re.findall(r"^\| `streamlet (.+?)` \|(.*)$", table, re.M)
    assert len(rows) >= 7
    for code, rest in rows:
        words = code.replace("\\|", "|").split()
        # a command of subcommands: each one the row names (`policies set ...`, `policies list`)
        actions = [action for named in re.findall(rf"(?:^|`){words[0]} (\S+)", code)
                   for action in named.replace("\\|", "|").split("|")
                   ] if words[0] in ("streams", "cluster", "policies") else [""]
        helps = "".join(cli(words[0], *([a] if a else []), "--help").stdout.decode()
                        for a in actions)
        for flag in re.findall(r"--[a-z][a-z-]*", code + rest):
            assert flag in helps, (code, flag)
