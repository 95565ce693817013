"""`produce` and `consume` over --protocol mega, rsio and sbp behave as over rabbitmq: a closed
pipe ends consume quietly (exit 0, "(output closed)"), SIGINT and SIGTERM end either with its
summary line and 130 or 143, every message counted is on stdout, and a refusal names the stream
and a reason in words (not an SBP stream id or a bare protocol code)."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamlet.client.mega import MegaError
from streamlet.client.sbp import SbpError
from streamlet.mega import ErrorCode as MegaCode
from streamlet.sbp import ErrorCode as SbpCode

from .support import (
    SIGINT,
    SIGTERM,
    STREAMLET,
    cli,
    every_protocol_broker,
    signal_and_wait,
    start,
    stderr_line,
    wait_until,
)

PROTOCOLS = ("mega", "rsio", "sbp")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[str]]]:
    """One broker serving every protocol: each protocol's connection options."""
    root = tmp_path_factory.mktemp("other-protocols")
    b, ports = every_protocol_broker(root / "data")
    yield {p: ["--protocol", p, "--host", b.host, "--port", str(n)] for p, n in ports.items()}
    b.stop()


def _lines(n: int) -> bytes:
    return b"".join(b"m%d\n" % i for i in range(n))


@pytest.mark.process
@pytest.mark.parametrize("protocol", (*PROTOCOLS, "rabbitmq"))
def test_consume_into_a_pipe_closed_early(node: dict[str, list[str]], protocol: str,
                                          tmp_path: Path) -> None:
    """`consume S | head -2` on a stream that then stays quiet: ends at once, exit 0."""
    c = node[protocol]
    stream = f"pipe-{protocol}"
    cli("produce", *c, stream, "--create", stdin=_lines(5))
    argv = " ".join(shlex.quote(a) for a in [*STREAMLET, "consume", *c, stream])
    shell = subprocess.run(
        f"set -o pipefail; {argv} 2>{tmp_path}/err | head -2", shell=True, executable="/bin/bash",
        capture_output=True, timeout=60, check=False)
    assert shell.stdout == b"0\tm0\n1\tm1\n"
    assert shell.returncode == 0, (tmp_path / "err").read_text()
    line = stderr_line((tmp_path / "err").read_bytes())
    assert line.startswith("consumed ") and line.endswith(f"from {stream} (output closed)")


@pytest.mark.process
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("signum", [SIGINT, SIGTERM])
def test_signal_during_consume(node: dict[str, list[str]], protocol: str, signum: int) -> None:
    c = node[protocol]
    stream = f"sig-consume-{protocol}-{signum}"
    cli("produce", *c, stream, "--create", stdin=_lines(3))
    p = start("consume", *c, stream)  # follows the stream: never ends alone
    assert p.stdout is not None
    assert [p.stdout.readline() for _ in range(3)][-1] == b"2\tm2\n"
    code, _, err = signal_and_wait(p, signum)
    assert code == 128 + signum
    assert stderr_line(err) == f"consumed 3 messages from {stream} (interrupted)"


@pytest.mark.process
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_signal_during_produce_from_an_open_pipe(node: dict[str, list[str]],
                                                 protocol: str) -> None:
    """Lines given, the pipe left open (a terminal, or a writer that goes on): Ctrl-C ends it
    with the summary, though the read of stdin is waiting."""
    c = node[protocol]
    stream = f"sig-produce-{protocol}"
    p = start("produce", *c, stream, "--create", stdin=subprocess.PIPE)
    assert p.stdin is not None
    p.stdin.write(b"a\nb\n")
    p.stdin.flush()
    wait_until(lambda: cli("consume", *c, stream, "--offset", "1", "--count", "1",
                           "--timeout", "0.5", check=False).stdout == b"1\tb\n")
    p.send_signal(SIGINT)
    code = p.wait(timeout=60)  # stdin still open: no end of input races the signal
    _, err = p.communicate(timeout=60)
    assert code == 130
    assert stderr_line(err) == f"streamlet: interrupted: 2 of 2 messages sent to {stream} confirmed"


@pytest.mark.process
@pytest.mark.parametrize("protocol", [*PROTOCOLS, "rabbitmq"])
def test_interrupted_consume_prints_every_message_it_counts(node: dict[str, list[str]],
                                                            protocol: str) -> None:
    """Its stdout a pipe nobody reads yet: a write blocked on the full pipe, interrupted by
    the signal, still writes all of it (the count in the summary is what was printed)."""
    c = node[protocol]
    stream = f"full-pipe-{protocol}"
    cli("produce", *c, stream, "--create", "--count", "30000", "--size", "100")
    p = start("consume", *c, stream)
    wait_until(lambda: _pipe_full(p), timeout=60)
    code, out, err = signal_and_wait(p, SIGINT)
    assert code == 130
    line = stderr_line(err)
    assert line.endswith(f"from {stream} (interrupted)")
    counted = int(line.split()[1])
    assert out.count(b"\n") == counted, line
    assert out.endswith(b"%d\t%s\n" % (counted - 1, b"x" * 100))


def _pipe_full(p: subprocess.Popen[bytes]) -> bool:
    """The process is blocked writing to its stdout (the pipe's reader reads nothing)."""
    wchan = Path(f"/proc/{p.pid}/wchan")
    return wchan.exists() and wchan.read_text().endswith("pipe_write")


@pytest.mark.process
@pytest.mark.parametrize("protocol, why", [
    ("mega", "no such stream"), ("sbp", "no such stream"), ("rsio", "no stream 'nosuch'")])
def test_refusals_name_the_stream(node: dict[str, list[str]], protocol: str, why: str) -> None:
    c = node[protocol]
    for argv, stdin in ((["consume", *c, "nosuch", "--timeout", "1"], None),
                        (["produce", *c, "nosuch"], b"x\n")):
        res = cli(*argv, stdin=stdin, check=False)
        assert res.returncode == 1
        assert stderr_line(res.stderr) == f"streamlet: nosuch: {why}"


@pytest.mark.process
@pytest.mark.parametrize("protocol, peer, why", [
    ("mega", "rabbitmq", "does not answer as a MEGA listener (the broker's --mega-port): "),
    ("rsio", "rabbitmq", "does not answer as an RSIO listener (the broker's --rsio-port): "),
    ("sbp", "mega", "does not answer as an SBP listener (the broker's --sbp-port)"),
])
def test_another_protocols_port_is_named(node: dict[str, list[str]], protocol: str, peer: str,
                                        why: str) -> None:
    port = node[peer][-1]
    res = cli("produce", *node[protocol][:-1], port, "s", stdin=b"x\n", check=False)
    assert res.returncode == 1
    assert stderr_line(res.stderr).startswith(f"streamlet: 127.0.0.1:{port} {why}")


@pytest.mark.parametrize("protocol, error, said", [
    ("mega", MegaError(MegaCode.TOPIC_NOT_FOUND), "s: no such stream"),
    ("mega", MegaError(MegaCode.INVALID_REQUEST), "s: not a stream name the broker takes"),
    ("mega", MegaError(MegaCode.NETWORK_ERROR), "s: this broker does not lead the stream "
                                                "(sealed, moved, or led by another member)"),
    ("mega", MegaError(200), "s: MEGA error 200"),
    ("sbp", SbpError(SbpCode.STREAM_NOT_FOUND, "no stream has id 2128608318284228620"),
     "s: no such stream"),
    ("sbp", SbpError(SbpCode.INVALID_REQUEST, "batch_count 0"), "s: batch_count 0"),
    ("sbp", SbpError(SbpCode.UNKNOWN, ""), "s: SBP error 1"),
    ("sbp", SbpError(250, "x"), "s: SBP error 250"),
])
def test_reason(protocol: str, error: Exception, said: str) -> None:
    from streamlet.cli.protocols import hooks
    from streamlet.cli.protocols.commands import reason

    assert reason("s", error, hooks(protocol)) == said
