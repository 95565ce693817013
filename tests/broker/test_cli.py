"""The `streamlet` command as a user runs it, against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.brokers import BrokerProcess, free_port


def cli(*args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "streamlet", *args], input=stdin,
                          capture_output=True, timeout=60, check=check)


def conn(b: BrokerProcess) -> list[str]:
    return ["--host", b.host, "--port", str(b.port)]


def test_help_lists_every_command() -> None:
    out = cli("--help").stdout.decode()
    for command in ("serve", "produce", "consume", "streams"):
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
    info = cli("streams", *c, "info", "cli-demo", "nope").stdout.decode()
    assert "cli-demo\tfirst_chunk_id=0" in info and "nope\tmissing" in info
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
        sent = cli("produce", *conn(a), "far-away", stdin=b"x\ny\n")
        assert f"far-away is on 127.0.0.1:{b.port}".encode() in sent.stderr
        assert cli("consume", *conn(a), "far-away", "--count", "2").stdout == b"0\tx\n1\ty\n"
        info = cli("streams", *conn(a), "info", "far-away").stdout.decode()
        assert info == f"far-away\ton 127.0.0.1:{b.port}\n"
        local = cli("streams", *conn(b), "info", "far-away").stdout.decode()
        assert local.startswith("far-away\tfirst_chunk_id=0")
    finally:
        a.stop()
        b.stop()
