"""What the help promises: --name resumes, --reference re-runs store nothing twice, bad values
are one-line errors, `streams info` tells what a stream holds and exits 1 for a missing one."""

from __future__ import annotations

import json

import pytest

from tests.support.brokers import BrokerProcess

from .support import cli, conn, stderr_line

pytestmark = pytest.mark.process


def test_consume_name_resumes_after_its_stored_offset(shared_broker: BrokerProcess) -> None:
    c = conn(shared_broker)
    cli("produce", *c, "resume", "--create", stdin=b"a\nb\nc\nd\n")
    first = cli("consume", *c, "resume", "--name", "r1", "--count", "2")
    assert first.stdout == b"0\ta\n1\tb\n"
    second = cli("consume", *c, "resume", "--name", "r1", "--count", "2")
    assert second.stdout == b"2\tc\n3\td\n"
    assert stderr_line(second.stderr) == (
        "consumed 2 messages from resume, resumed after offset 1, offset 3 stored for r1")
    # an explicit --offset wins over the stored one
    assert cli("consume", *c, "resume", "--name", "r1", "--offset", "0",
               "--count", "1").stdout == b"0\ta\n"


def test_produce_reference_twice_stores_the_input_once(shared_broker: BrokerProcess) -> None:
    c = conn(shared_broker)
    lines = b"one\ntwo\nthree\n"
    assert cli("produce", *c, "dedup", "--create", "--reference", "ref1",
               stdin=lines).stderr == b"published 3 messages to dedup\n"
    again = cli("produce", *c, "dedup", "--reference", "ref1", stdin=lines + b"four\n")
    assert stderr_line(again.stderr) == (
        "published 1 message to dedup (3 skipped: stored before under reference ref1)")
    out = cli("consume", *c, "dedup", "--timeout", "1").stdout
    assert [line.split(b"\t")[1] for line in out.splitlines()] == [b"one", b"two", b"three",
                                                                    b"four"]
    # generated messages are numbered the same way
    cli("produce", *c, "dedup-n", "--create", "--reference", "g", "--count", "5")
    cli("produce", *c, "dedup-n", "--reference", "g", "--count", "5")
    info = json.loads(cli("streams", *c, "info", "dedup-n", "--json").stdout)
    assert info["messages"] == 5 and info["sequence:g"] == 5


@pytest.mark.parametrize("argv, why", [
    (["produce", "s", "--count", "-5"], "argument --count: must be at least 1, not -5"),
    (["produce", "s", "--size", "big"], "argument --size: must be an integer, not 'big'"),
    (["consume", "s", "--count", "0"], "argument --count: must be at least 1, not 0"),
    (["consume", "s", "--timeout", "-1"], "argument --timeout: must be more than 0, not -1"),
    (["streams", "create-super", "s", "--partitions", "0"],
     "argument --partitions: must be at least 1, not 0"),
    (["consume", "s", "--port", "70000"], "argument --port: a port is 0..65535, not 70000"),
])
def test_bad_values_are_one_line_errors(argv: list[str], why: str) -> None:
    res = cli(*argv, check=False)
    assert res.returncode == 2
    assert why in stderr_line(res.stderr)


def test_streams_info(shared_broker: BrokerProcess) -> None:
    c = conn(shared_broker)
    cli("streams", *c, "create", "rich", "--max-age", "7D", "--max-length-bytes", "1000000")
    cli("produce", *c, "rich", "--reference", "imp", stdin=b"x\ny\nz\n")
    cli("consume", *c, "rich", "--name", "reader", "--count", "2")
    res = cli("streams", *c, "info", "rich")
    text = res.stdout.decode()
    for expected in ("rich\n", f"leader: 127.0.0.1:{shared_broker.port}", "replicas: none",
                     "offsets: 0..", "messages: 3", "in 1 segment(s)",
                     "retention: max-age 7D and max-length-bytes 1000000",
                     "stored consumer offsets: reader=1", "publisher sequences: imp=3"):
        assert expected in text, (expected, text)
    doc = json.loads(cli("streams", *c, "info", "rich", "--json").stdout)
    assert doc["size_bytes"] > 0 and doc["offset:reader"] == 1 and doc["max_age_ms"] == 604800000
    missing = cli("streams", *c, "info", "nosuch", check=False)
    assert missing.returncode == 1 and missing.stdout == b""
    assert stderr_line(missing.stderr) == "streamlet: nosuch: no such stream"


async def test_stream_stats_details_only_when_asked(shared_broker: BrokerProcess) -> None:
    """The details `streams info` shows count every segment's messages: only a connection that
    asks for them (STREAM_DETAILS) gets them; RabbitMQ's clients get StreamStats' own keys."""
    from streamlet.client import connect
    from streamlet.rabbitmq.constants import STREAM_DETAILS

    b = shared_broker
    async with await connect(b.host, b.port) as c:
        await c.create_stream("details")
        producer = await c.producer("details")
        await producer.send_many([b"x", b"y"])
        await producer.flush()
        plain = await c.stream_stats("details")
    async with await connect(b.host, b.port, properties={STREAM_DETAILS: "true"}) as c:
        detailed = await c.stream_stats("details")
    assert set(plain) == {"first_chunk_id", "committed_chunk_id", "last_chunk_id", "sealed"}
    assert detailed["messages"] == 2 and set(plain) < set(detailed)
