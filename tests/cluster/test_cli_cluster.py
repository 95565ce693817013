"""The `streamlet` client commands against a 3-node `streamlet cluster up`: `streams create
--replicas`, `streams info` on a follower, and `consume` through the leader's kill (on the
leader and on a follower, every message once, in order)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from tests.cluster.test_failover import _led, _led_after
from tests.cluster.test_local_cluster import HOST, Cluster, cli, wait_until

pytestmark = pytest.mark.process

START_S = 120.0


@pytest.fixture
def cluster(tmp_path: Path) -> object:
    c = Cluster(tmp_path / "c", 3).start()
    yield c
    c.stop()


def at(port: int) -> list[str]:
    return ["--host", HOST, "--port", str(port)]


def produce(port: int, stream: str, bodies: list[str]) -> None:
    res = subprocess.run([sys.executable, "-m", "streamlet", *at(port), "produce", stream],
                         input="".join(f"{b}\n" for b in bodies), capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr


def test_create_with_replicas_and_info_on_a_follower(cluster: Cluster) -> None:
    p0, p1, p2 = cluster.ports()
    made = cli(*at(p0), "streams", "create", "three", "--replicas", "3")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == (f"created three: 3 copies, leader {HOST}:{p0}, replicas "
                                   f"{HOST}:{p1}, {HOST}:{p2}")
    wait_until(lambda: _led(cluster, "three") == (1, 0), START_S, "the driver's record")
    produce(p1, "three", [f"m-{i}" for i in range(10)])  # produce goes to the leader

    def on_follower() -> str | None:
        res = cli(*at(p2), "streams", "info", "three")
        return res.stdout if "messages: 10" in res.stdout else None

    shown = wait_until(on_follower, 60, "the follower's info with every message")
    assert f"read on replica {HOST}:{p2}" in shown and "offsets: 0..10" in shown
    assert "held by" not in shown and "sealed" not in shown
    # asked of a broker that is not a member, it is the leader's info
    more = cli(*at(p0), "streams", "create", "five", "--replicas", "5")
    assert more.returncode == 0, more.stderr
    assert more.stdout.startswith("created five: 3 copies")
    assert "5 replicas asked, the cluster has 3 brokers: one copy on each" in more.stderr


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _read(path: Path, n: int) -> bool:
    return len(_lines(path)) >= n


def test_consume_goes_on_through_a_leader_kill(cluster: Cluster, tmp_path: Path) -> None:
    p0, p1, p2 = cluster.ports()
    made = cli(*at(p0), "streams", "create", "through", "--replicas", "3")
    assert made.returncode == 0, made.stderr
    wait_until(lambda: _led(cluster, "through") == (1, 0), START_S, "the driver's record")
    half = [f"m-{i}" for i in range(300)]
    produce(p0, "through", half)
    readers: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for name, port in (("on-leader", p0), ("on-follower", p2)):
        out = tmp_path / f"{name}.out"
        with open(out, "wb") as stdout, open(tmp_path / f"{name}.err", "wb") as stderr:
            readers[name] = (subprocess.Popen(
                [sys.executable, "-m", "streamlet", *at(port), "consume", "through", "--count",
                 "600"], stdout=stdout, stderr=stderr), out)
    try:
        for name, (_, out) in readers.items():
            wait_until(partial(_read, out, 300), 60, f"{name} read the first half")
        os.kill(cluster.state()["nodes"][0]["pid"], signal.SIGKILL)
        epoch, leader = wait_until(lambda: _led_after(cluster, "through", 1, value=True),
                                   START_S, "a new leader")
        assert leader != 0
        produce(cluster.ports()[leader], "through", [f"m-{i}" for i in range(300, 600)])
        for name, (proc, out) in readers.items():
            assert proc.wait(120) == 0, (tmp_path / f"{name}.err").read_text()
            offsets, bodies = zip(*(line.split("\t") for line in _lines(out)), strict=True)
            assert bodies == tuple(f"m-{i}" for i in range(600)), f"{name}: once, in order"
            # increasing (a new epoch's leader writes a chunk of its own: offsets skip one)
            assert list(map(int, offsets)) == sorted(set(map(int, offsets)))
        lost = (tmp_path / "on-leader.err").read_text()
        assert f"streamlet: lost {HOST}:{p0}" in lost and "reading on from" in lost
        assert "consumed 600 messages from through" in lost
        stayed = (tmp_path / "on-follower.err").read_text()
        assert "lost" not in stayed, "the follower's reader was not interrupted"
    finally:
        for proc, _ in readers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
