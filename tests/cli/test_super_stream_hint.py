"""A super stream given to `produce` or `consume`, which take a stream: a one-line hint (exit
2) to give --routing-key or name a partition, and `produce --create` makes no stream of the
super stream's name."""

from __future__ import annotations

import json

import pytest

from tests.support.brokers import BrokerProcess

from .support import cli, conn, stderr_line


@pytest.mark.process
def test_produce_and_consume_of_a_super_stream(shared_broker: BrokerProcess) -> None:
    c = conn(shared_broker)
    cli("streams", *c, "create-super", "orders", "--partitions", "2")
    for create in ([], ["--create"]):
        res = cli("produce", *c, "orders", *create, stdin=b"x\n", check=False)
        assert res.returncode == 2
        assert stderr_line(res.stderr) == (
            "streamlet: orders is a super stream, not a stream: give --routing-key KEY (to "
            "publish to the partition KEY routes to), or name one of its partitions: "
            "orders-0, orders-1")
    res = cli("consume", *c, "orders", "--timeout", "1", check=False)
    assert res.returncode == 2
    assert stderr_line(res.stderr) == (
        "streamlet: orders is a super stream, not a stream: name one of its partitions "
        "(consume reads one stream): orders-0, orders-1")
    missing = cli("streams", *c, "info", "orders", check=False)
    assert missing.returncode == 1  # --create made no stream called orders
    # the ways the hint names work
    assert b"published 1 message to orders-1" in cli(
        "produce", *c, "orders", "--routing-key", "1", stdin=b"x\n").stderr
    info = json.loads(cli("streams", *c, "info", "orders-1", "--json").stdout)
    assert info["messages"] == 1


@pytest.mark.parametrize("command, partitions, line", [
    ("produce", ["a-0", "a-1", "a-2", "a-3", "a-4"],
     "a is a super stream, not a stream: give --routing-key KEY (to publish to the partition "
     "KEY routes to), or name one of its partitions: a-0, a-1, a-2, a-3, ..."),
    ("consume", ["a-x"], "a is a super stream, not a stream: name one of its partitions "
                         "(consume reads one stream): a-x"),
])
def test_hint(command: str, partitions: list[str], line: str) -> None:
    from streamlet.cli.rabbitmq.hints import hint

    assert hint(command, "a", partitions) == line
