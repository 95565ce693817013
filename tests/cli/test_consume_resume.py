"""`streamlet consume` through its broker's restart: it subscribes again after the last offset
it printed, so every message is printed once, in order (a replicated stream's leader kill is in
tests/cluster/test_cli_cluster.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess

from .support import STREAMLET, cli, conn, wait_until

pytestmark = pytest.mark.process


def test_consume_goes_on_through_a_broker_restart(broker: BrokerProcess, tmp_path: Path) -> None:
    c = conn(broker)
    cli(*c, "produce", "again", "--create", stdin=b"".join(b"m-%d\n" % i for i in range(5)))
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        reader = subprocess.Popen([*STREAMLET, *c, "consume", "again", "--count", "10"],
                                  stdout=stdout, stderr=stderr)
    try:
        wait_until(lambda: len(out.read_bytes().splitlines()) >= 5)
        broker.restart()
        cli(*c, "produce", "again", stdin=b"".join(b"m-%d\n" % i for i in range(5, 10)))
        assert reader.wait(120) == 0, err.read_text()
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert out.read_text().splitlines() == [f"{i}\tm-{i}" for i in range(10)]
    said = err.read_text()
    assert f"streamlet: lost {broker.host}:{broker.port}" in said
    assert f"reading on from {broker.host}:{broker.port} at offset 5" in said
