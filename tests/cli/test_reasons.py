"""Errors say why, in one line: a refused create, a bad environment value or --log-level, an
unknown config key. A Create with other arguments for an existing stream is refused as
RabbitMQ refuses it (PRECONDITION_FAILED)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess, free_port

from .support import cli, conn, stderr_line

pytestmark = pytest.mark.process


def test_create_refused_says_why(shared_broker: BrokerProcess) -> None:
    c = conn(shared_broker)
    bad = cli("streams", *c, "create", "why-1", "--max-age", "7d", check=False)
    assert bad.returncode == 1
    assert stderr_line(bad.stderr) == (
        "streamlet: cannot create why-1: bad duration '7d': expected a number and one of "
        "Y M D h m s, e.g. 7D")
    cli("streams", *c, "create", "why-2", "--max-age", "7D")
    same = cli("streams", *c, "create", "why-2", "--max-age", "7D", check=False)
    assert same.returncode == 1 and b"STREAM_ALREADY_EXISTS" in same.stderr
    other = cli("streams", *c, "create", "why-2", "--max-age", "1D", check=False)
    assert other.returncode == 1
    assert stderr_line(other.stderr) == ("streamlet: cannot create why-2: why-2 exists with "
                                         "different arguments (streamlet streams info why-2 "
                                         "shows them)")


async def test_create_with_other_arguments_is_a_precondition_failure(
        shared_broker: BrokerProcess) -> None:
    from streamlet.client import StreamletError, connect
    from streamlet.rabbitmq import Code

    async with await connect(shared_broker.host, shared_broker.port) as client:
        await client.create_stream("pf", {"max-length-bytes": "1000000"})
        await client.create_stream("pf", {"max-length-bytes": "1000000"}, exists_ok=True)
        await client.create_stream("pf", {}, exists_ok=True)  # nothing asked, nothing differs
        with pytest.raises(StreamletError) as e:
            await client.create_stream("pf", {"max-length-bytes": "5"}, exists_ok=True)
        assert e.value.code == Code.PRECONDITION_FAILED


def _serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    res = cli("serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "d"), *args,
              env=env, check=False)
    return res.returncode, stderr_line(res.stderr)


@pytest.mark.parametrize("toml, why", [
    ("[server]\nprot = 15553\n", "unknown key(s) in [server]: prot"),
    ("[retention]\nmax_ag = '7D'\n", "unknown key(s) in [retention]: max_ag"),
])
def test_unknown_config_keys_are_refused(tmp_path: Path, toml: str, why: str) -> None:
    cfg = tmp_path / "b.toml"
    cfg.write_text(toml)
    assert _serve(tmp_path, "--config", str(cfg)) == (2, f"streamlet: {why}")


def test_bad_environment_and_log_level(tmp_path: Path) -> None:
    code, line = _serve(tmp_path, env={"STREAMLET_ADVERTISED_PORT": "abc"})
    assert (code, line) == (2, "streamlet: STREAMLET_ADVERTISED_PORT must be a port (1..65535), "
                               "got 'abc'")
    code, line = _serve(tmp_path, "--log-level", "LOUD")
    assert code == 2 and "argument --log-level: invalid choice: 'LOUD'" in line


@pytest.mark.parametrize("args, why", [
    (["streams", "create", ""], "streamlet streams create: argument name: a stream name has 1 "
                                "to 255 bytes, not ''"),
    (["streams", "create", "amq.x"], "streamlet streams create: argument name: names starting "
                                     "with 'amq.' are reserved, not 'amq.x'"),
    (["consume", "s", "--offset", "@abc"],
     "streamlet consume: argument --offset: must be first, last, next, an offset (0, 1, ...) "
     "or @ and a timestamp in milliseconds (@1767225600000), not '@abc'"),
    (["consume", "s", "--offset", "-3"], "not '-3'"),
    (["streams", "create", "s", "--replicas", "0"], "argument --replicas: must be at least 1"),
])
def test_bad_values_are_one_line_before_connecting(args: list[str], why: str) -> None:
    # no broker: refused while parsing, exit 2
    res = cli("--port", str(free_port()), *args, check=False)
    assert res.returncode == 2
    line = stderr_line(res.stderr)
    assert why in line and line.endswith("--help)")


async def test_first_last_and_timestamps_still_work(shared_broker: BrokerProcess) -> None:
    c = conn(shared_broker)
    cli("produce", *c, "offsets-1", "--create", "--count", "3")
    for offset, first in (("FIRST", "0"), ("2", "2"), ("@0", "0"), ("next", None)):
        res = cli("consume", *c, "offsets-1", "--offset", offset, "--timeout", "1")
        lines = res.stdout.decode().splitlines()
        assert (lines[0].split("\t")[0] if lines else None) == first, offset
