"""The `streamlet` command run as a user runs it: a subprocess against a real broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.brokers import BrokerProcess, distinct_ports

STREAMLET = [sys.executable, "-m", "streamlet"]


def cli(*args: str, stdin: bytes | None = None, check: bool = True,
        env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*STREAMLET, *args], input=stdin, capture_output=True, timeout=120,
                          check=check, env={**os.environ, **(env or {})}, cwd=cwd)


def every_protocol_broker(data: Path) -> tuple[BrokerProcess, dict[str, int]]:
    """A broker serving every protocol on free ports (no metrics or API port), started: it and
    each protocol's port."""
    port, mega, rsio, sbp = distinct_ports(4)
    b = BrokerProcess(data, port=port, extra_args=[
        "--mega-port", str(mega), "--rsio-port", str(rsio), "--sbp-port", str(sbp),
        "--metrics-port", "0", "--http-port", "0"]).start()
    return b, {"rabbitmq": port, "mega": mega, "rsio": rsio, "sbp": sbp}


def conn(b: BrokerProcess) -> list[str]:
    return ["--host", b.host, "--port", str(b.port)]


def start(*args: str, stdin: int | None = subprocess.DEVNULL,
          stdout: int | None = subprocess.PIPE) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*STREAMLET, *args], stdin=stdin, stdout=stdout,
                            stderr=subprocess.PIPE)


def wait_until(what: Callable[[], object], timeout: float = 60, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not so after {timeout} s")
        time.sleep(every)


def signal_and_wait(p: subprocess.Popen[bytes], signum: int,
                    timeout: float = 60) -> tuple[int, bytes, bytes]:
    p.send_signal(signum)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def stderr_line(err: bytes) -> str:
    """The command's stderr, which must be one line (no traceback)."""
    text = err.decode()
    assert "Traceback" not in text, text
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


SIGINT, SIGTERM = signal.SIGINT, signal.SIGTERM
