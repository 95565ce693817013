"""`streamlet perf` run as a user runs it, against a real broker: the summary's counts agree
with each other, --json's shape, Ctrl-C and SIGTERM end it with a summary, bad input is one
line. No assertion on speed: rates only have to be positive."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerProcess

from .support import SIGINT, SIGTERM, cli, conn, signal_and_wait, start, stderr_line, wait_until

pytestmark = pytest.mark.process

PERCENTILES = ["p50", "p75", "p95", "p99", "max"]


def check_summary(doc: dict[str, Any], drained: bool) -> None:
    """What every summary must satisfy; ``drained``: the run ended by --time, so every
    published message was confirmed and consumed."""
    assert set(doc) >= {"settings", "interrupted", "elapsed_s", "published", "confirmed",
                        "errored", "consumed", "rates", "latency_ms"}
    assert doc["published"] > 0
    assert doc["errored"] == 0
    assert doc["confirmed"] <= doc["published"]
    for key in ("published_per_s", "confirmed_per_s", "consumed_per_s"):
        assert doc["rates"][key] > 0, doc["rates"]
    for kind in ("confirm", "consume"):
        lat = doc["latency_ms"][kind]
        assert list(lat) == PERCENTILES
        values = [lat[k] for k in PERCENTILES]
        assert all(v is not None and v >= 0 for v in values), lat
        assert values == sorted(values), lat  # percentiles never decrease; max above all
    if drained:
        assert doc["confirmed"] == doc["published"]
        assert doc["consumed"] == doc["published"]
        assert doc["latency_samples"] == {"confirm": doc["published"],
                                          "consume": doc["published"]}


def perf(b: BrokerProcess, *args: str) -> subprocess.CompletedProcess[bytes]:
    return cli("perf", *conn(b), *args, check=False)


def test_a_timed_run_drains_and_sums_up_as_json(shared_broker: BrokerProcess) -> None:
    r = perf(shared_broker, "--streams", "perf-json", "--time", "2", "--offset", "first",
             "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    check_summary(doc, drained=True)
    assert doc["interrupted"] is False
    assert doc["settings"]["streams"] == ["perf-json"] and doc["settings"]["size"] == 100
    live = r.stderr.decode().splitlines()
    assert live and all(" published " in line and "latency p50/p99 ms" in line for line in live)
    assert "Traceback" not in r.stderr.decode()


def test_several_producers_and_consumers_at_a_rate_in_text(shared_broker: BrokerProcess) -> None:
    """Two streams, two producers at 2,000 msg/s in all, four consumers (two a stream, each
    reading every message of its stream), two worker processes a kind."""
    r = perf(shared_broker, "--stream-count", "2", "--producers", "2", "--consumers", "4",
             "--processes", "2", "--rate", "2000", "--size", "64", "--time", "2",
             "--delete-streams")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("streamlet perf against streamlet ")
    assert "2 producer(s), 4 consumer(s), 2 stream(s), 64 B messages" in lines[0]
    counts = {line.split()[0]: int(line.split()[1].replace(",", "")) for line in lines[1:4]}
    assert counts["published"] == counts["confirmed"] > 0
    assert counts["consumed"] == 2 * counts["published"]  # each message read by two consumers
    assert lines[4].startswith("confirm latency ms: p50 ")
    assert lines[5].startswith("consume latency ms: p50 ")
    gone = cli("streams", *conn(shared_broker), "info", "perf-stream-1", check=False)
    assert gone.returncode == 1  # --delete-streams


@pytest.mark.parametrize("signum", [SIGINT, SIGTERM])
def test_a_signal_ends_the_run_with_its_summary(shared_broker: BrokerProcess,
                                                signum: int) -> None:
    stream = f"perf-signal-{signum}"
    p = start("perf", *conn(shared_broker), "--streams", stream, "--json")
    assert p.stderr is not None
    # interrupted once it runs: after its first live line
    first = p.stderr.readline()
    assert b" published " in first, first + p.stderr.read()
    workers = _children(p.pid)
    assert len(workers) >= 2  # a producer process and a consumer process
    code, out, err = signal_and_wait(p, signum)
    assert code == 128 + signum, err
    doc = json.loads(out)
    check_summary(doc, drained=False)
    assert doc["interrupted"] is True
    assert "Traceback" not in err.decode()
    # the worker processes ended with it
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), timeout=30)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(d.name))
    return found


def test_a_missing_stream_with_no_create_is_one_line(shared_broker: BrokerProcess) -> None:
    r = perf(shared_broker, "--streams", "perf-nosuch", "--no-create", "--time", "1")
    assert r.returncode == 1
    assert stderr_line(r.stderr) == ("streamlet: stream perf-nosuch does not exist (leave out "
                                     "--no-create to create it)")
    assert r.stdout == b""


@pytest.mark.parametrize(("args", "says"), [
    (["--size", "4"], "must be at least 8 (the send time), not 4"),
    (["--rate", "-1"], "must be at least 0, not -1"),
    (["--producers", "x"], "must be an integer, not 'x'"),
    (["--streams", ","], "give at least one stream name"),
])
def test_bad_options_are_one_line(args: list[str], says: str) -> None:
    r = cli("perf", *args, check=False)
    assert r.returncode == 2
    assert says in stderr_line(r.stderr)


def test_no_broker_is_one_line() -> None:
    from tests.support.brokers import free_port

    r = cli("perf", "--port", str(free_port()), "--time", "1", check=False)
    assert r.returncode == 1
    assert stderr_line(r.stderr).startswith("streamlet: cannot connect to 127.0.0.1:")
