"""What a newcomer reads: counts in words ("1 message"), sizes in one unit family (binary, in
`streams info` and `streams list` alike), produce's and consume's --count both at least 1,
--size refused without --count (stdin's lines are sent as they are), `streams partitions
--keys` explained in its help, and a hint when consume prints AMQP 1.0 messages raw."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from streamlet.amqp import encode_data
from tests.support.brokers import BrokerProcess, distinct_ports

from .support import cli, stderr_line


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    root = tmp_path_factory.mktemp("polish")
    port, http = distinct_ports(2)
    b = BrokerProcess(root / "data", port=port, extra_args=[
        "--http-port", str(http), "--metrics-port", "0"]).start()
    yield ["--port", str(port)]
    b.stop()


@pytest.mark.process
def test_one_message_is_singular(node: list[str]) -> None:
    produced = cli("produce", *node, "one", "--create", stdin=b"only\n")
    assert stderr_line(produced.stderr) == "published 1 message to one"
    consumed = cli("consume", *node, "one", "--count", "1")
    assert stderr_line(consumed.stderr) == "consumed 1 message from one"


@pytest.mark.process
def test_sizes_in_one_unit_family(node: list[str]) -> None:
    cli("produce", *node, "sized", "--create", "--count", "30000", "--size", "100")
    info = cli("streams", *node, "info", "sized").stdout.decode()
    size = json.loads(cli("streams", *node, "info", "sized", "--json").stdout)["size_bytes"]
    shown = f"{size / 1024 / 1024:.1f} MiB"
    assert f"size on disk: {shown} ({size} bytes)" in info, info
    listed = cli("streams", *node, "list").stdout.decode()
    row = next(line for line in listed.splitlines() if " sized " in f" {line} ")
    assert shown in row, listed
    assert " MB" not in info + listed and " kB" not in info + listed


@pytest.mark.parametrize("n, shown", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (3 * 1024 * 1024, "3.0 MiB"), (5 * 1024 ** 3, "5.0 GiB"), (2 * 1024 ** 4, "2.0 TiB"),
])
def test_size(n: int, shown: str) -> None:
    from streamlet.cli.words import size

    assert size(n) == shown


@pytest.mark.process
@pytest.mark.parametrize("argv, stdin, why", [
    (["produce", "s", "--count", "0"], None, "argument --count: must be at least 1, not 0"),
    (["consume", "s", "--count", "0"], None, "argument --count: must be at least 1, not 0"),
    (["produce", "s", "--size", "10"], b"x\n", "--size: the size of generated messages, with "
                                               "--count (standard input's lines are sent as "
                                               "they are)"),
])
def test_usage_errors(argv: list[str], stdin: bytes | None, why: str) -> None:
    res = cli(*argv, stdin=stdin, check=False)
    assert res.returncode == 2
    assert why in stderr_line(res.stderr)


@pytest.mark.process
def test_partitions_help_explains_keys() -> None:
    text = " ".join(cli("streams", "partitions", "--help").stdout.decode().split())
    assert "--keys K1,K2" in text and "'route K<TAB>partition,...' for each key" in text


@pytest.mark.process
def test_raw_amqp_output_gets_a_hint(node: list[str]) -> None:
    cli("produce", *node, "amqp-raw", "--create", "--format", "amqp", stdin=b"hello\n")
    res = cli("consume", *node, "amqp-raw", "--count", "1")
    assert res.stdout.startswith(b"0\t\x00Su")
    assert res.stderr.decode().splitlines() == [
        "streamlet: these messages are AMQP 1.0 messages (as RabbitMQ's clients publish them): "
        "--format amqp prints their bodies",
        "consumed 1 message from amqp-raw"]
    cli("produce", *node, "plain-raw", "--create", stdin=b"hello\n")
    plain = cli("consume", *node, "plain-raw", "--count", "1")
    assert stderr_line(plain.stderr) == "consumed 1 message from plain-raw"


@pytest.mark.parametrize("body, amqp", [
    (encode_data(b"x"), True),
    (b"\x00Su\xa0\x01x", True),
    (b"plain text", False),
    (b"\x00Su", False),  # a section's start, then nothing: not a message
    (b"\x00S\x10\xa0\x01x", False),  # a described value, not a message section
    (b"", False),
])
def test_looks_like_amqp(body: bytes, amqp: bool) -> None:
    from streamlet.cli.rabbitmq.hints import looks_like_amqp

    assert looks_like_amqp(body) is amqp
