"""Ctrl-C on `streamlet produce` while it reads an open pipe that keeps giving lines: exit 130
and the summary line, never an interpreter abort (a daemon thread reading stdin inside its
buffered reader's lock when the interpreter exits aborts it: exit 134, "Fatal Python error")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.brokers import BrokerProcess

from .support import SIGINT, STREAMLET, cli, conn, signal_and_wait, stderr_line, wait_until

pytestmark = pytest.mark.process

#: a writer that never stops: the pipe stays open and full
ENDLESS = "import sys\nw = sys.stdout.buffer\nwhile True:\n    w.write(b'line\\n' * 4096)\n"


#: rounds: the abort depended on where the reading thread was when the signal came
ROUNDS = 5


def test_sigint_while_reading_an_endless_pipe(shared_broker: BrokerProcess) -> None:
    c = conn(shared_broker)
    for i in range(ROUNDS):
        _interrupt_once(c, f"stdin-endless-{i}")


def _interrupt_once(c: list[str], stream: str) -> None:
    cli("streams", *c, "create", stream)
    writer = subprocess.Popen([sys.executable, "-c", ENDLESS], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
    assert writer.stdout is not None
    try:
        p = subprocess.Popen([*STREAMLET, "produce", *c, stream], stdin=writer.stdout,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        writer.stdout.close()  # the produce holds the only reading end
        # interrupted while lines flow: once the stream holds some
        wait_until(lambda: cli("consume", *c, stream, "--count", "1", "--timeout", "0.5",
                               check=False).stdout)
        code, _, err = signal_and_wait(p, SIGINT)
    finally:
        writer.kill()
        writer.wait()
    assert b"Fatal Python error" not in err, err
    line = stderr_line(err)
    assert code == 130, err
    assert line.startswith("streamlet: interrupted: ") and f"sent to {stream} confirmed" in line
