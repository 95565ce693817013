"""Ctrl-C, SIGTERM and closed pipes end `produce` and `consume` with a summary line, the
conventional exit code and, with --name, the consumer's offset stored."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess

from .support import SIGINT, SIGTERM, cli, conn, signal_and_wait, start, stderr_line, wait_until

pytestmark = pytest.mark.process


@pytest.mark.parametrize("signum", [SIGINT, SIGTERM])
def test_signal_during_produce_count(shared_broker: BrokerProcess, signum: int) -> None:
    c = conn(shared_broker)
    stream = f"int-produce-{signum}"
    cli("streams", *c, "create", stream)
    p = start("produce", *c, stream, "--count", "100000000")
    # interrupted mid-way: once the stream holds messages
    wait_until(lambda: cli("consume", *c, stream, "--count", "1", "--timeout", "0.5").stdout)
    code, out, err = signal_and_wait(p, signum)
    line = stderr_line(err)
    assert code == 128 + signum, err
    assert line.startswith("streamlet: interrupted: ") and f"sent to {stream} confirmed" in line
    confirmed = int(line.split()[2])
    assert 0 < confirmed < 100000000
    # every confirmed message is in the stream: read the one at the confirmed count - 1
    got = cli("consume", *c, stream, "--offset", str(confirmed - 1), "--count", "1").stdout
    assert got.startswith(f"{confirmed - 1}\t".encode())


@pytest.mark.parametrize("signum", [SIGINT, SIGTERM])
def test_signal_during_consume_stores_the_offset(shared_broker: BrokerProcess,
                                                 signum: int) -> None:
    c = conn(shared_broker)
    stream = f"int-consume-{signum}"
    cli("produce", *c, stream, "--create", stdin=b"".join(b"m%d\n" % i for i in range(10)))
    p = start("consume", *c, stream, "--name", "r1")  # follows the stream: never ends alone
    assert p.stdout is not None
    got = [p.stdout.readline() for _ in range(10)]  # everything there was, printed
    assert got[-1] == b"9\tm9\n"
    code, out, err = signal_and_wait(p, signum)
    assert code == 128 + signum
    assert stderr_line(err) == f"consumed 10 messages from {stream}, offset 9 stored for r1 (interrupted)"
    cli("produce", *c, stream, stdin=b"m10\n")
    again = cli("consume", *c, stream, "--name", "r1", "--count", "1")
    offset, body = again.stdout.split(b"\t")
    assert body == b"m10\n" and int(offset) > 9  # the stored offset's tracking record took one
    assert b"resumed after offset 9" in again.stderr


def test_signal_while_connecting_or_reading_stdin(shared_broker: BrokerProcess) -> None:
    """A produce waiting on a terminal-like stdin (nothing comes) stops at once too."""
    c = conn(shared_broker)
    p = start("produce", *c, "int-stdin", "--create", stdin=subprocess.PIPE)
    wait_until(lambda: cli("streams", *c, "info", "int-stdin", check=False).returncode == 0)
    code, _, err = signal_and_wait(p, SIGINT, timeout=30)
    assert code == 130
    assert stderr_line(err) == "streamlet: interrupted: 0 of 0 messages sent to int-stdin confirmed"


def test_consume_into_a_pipe_closed_early(shared_broker: BrokerProcess, tmp_path: Path) -> None:
    """`streamlet consume S | head -2`: head exits, consume ends quietly, offset stored."""
    c = conn(shared_broker)
    stream = "int-pipe"
    cli("produce", *c, stream, "--create", "--count", "50000", "--size", "100")
    shell = subprocess.run(
        f"{' '.join(map(str, _argv('consume', *c, stream, '--name', 'p1')))} 2>{tmp_path}/err"
        " | head -2", shell=True, capture_output=True, timeout=120, check=True)
    assert shell.stdout.splitlines()[0].startswith(b"0\tx")
    assert len(shell.stdout.splitlines()) == 2
    err = (tmp_path / "err").read_bytes()
    line = stderr_line(err)
    assert line.endswith("(output closed)") and "stored for p1" in line
    stored = int(line.split("offset ")[1].split()[0])
    assert 2 <= stored < 50000 - 1


def _argv(*args: str) -> list[str]:
    import shlex
    import sys

    return [shlex.quote(a) for a in [sys.executable, "-m", "streamlet", *args]]
