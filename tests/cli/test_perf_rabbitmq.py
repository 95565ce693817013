"""The same `streamlet perf` command against RabbitMQ itself (Debian's rabbitmq-server, a
private node on free loopback ports started by bench/servers.py), so that what users compare
is known to run: a timed run drains, and its summary is consistent.

Needs rabbitmq-server installed (.ci/install-system-deps does not install it): where it is
missing the test is skipped saying so, and the comparison is the manual command in
docs/performance.md ("streamlet perf"). Where it is installed, a node that does not start
fails the test."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bench.servers import RabbitMQ, free_port, port_open, rabbitmq_installed

from .support import cli
from .test_perf import check_summary

pytestmark = [pytest.mark.process, pytest.mark.skipif(
    not rabbitmq_installed(),
    reason="rabbitmq-server is not installed (apt-get install rabbitmq-server): run the "
           "comparison by hand as docs/performance.md shows")]


def _amqp_port() -> int:
    """A free AMQP port whose distribution port (+20000, bench/servers.py) is free too."""
    for _ in range(100):
        p = free_port()
        if p < 45000 and not port_open(p + 20000):
            return p
    raise RuntimeError("no free AMQP port below 45000")


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQ]:
    root = tmp_path_factory.mktemp("rabbitmq")
    node = RabbitMQ.start(root, stream_port=free_port(), amqp_port=_amqp_port(),
                          epmd_port=free_port(), nodename=f"perf-test-{free_port()}@localhost")
    yield node
    node.stop()


def test_a_timed_run_against_rabbitmq(rabbitmq: RabbitMQ) -> None:
    r = cli("perf", "--port", str(rabbitmq.port), "--time", "2", "--offset", "first",
            "--streams", "perf-rabbitmq", "--producers", "2", "--consumers", "2",
            "--rate", "20000", "--json", "--delete-streams", check=False)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["settings"]["server"].startswith("RabbitMQ 3.")
    # two consumers on the one stream: each read every message
    assert doc["consumed"] == 2 * doc["published"]
    doc["consumed"] //= 2
    doc["latency_samples"]["consume"] //= 2
    check_summary(doc, drained=True)


def test_an_interrupted_run_against_rabbitmq(rabbitmq: RabbitMQ) -> None:
    p = subprocess.Popen([sys.executable, "-m", "streamlet", "perf", "--port",
                          str(rabbitmq.port), "--streams", "perf-rabbitmq-int", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stderr is not None
    first = p.stderr.readline()
    assert b" published " in first, first + p.stderr.read()
    p.send_signal(2)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    doc = json.loads(out)
    assert doc["interrupted"] is True
    check_summary(doc, drained=False)
