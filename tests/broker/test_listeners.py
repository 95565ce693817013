"""Starting the broker's listeners: the RabbitMQ port opens last, so whoever waits for it (a
client, a readiness probe, the tests' BrokerProcess) finds every other listener open; a port
that cannot be listened on stops the broker with that listener's address."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess, free_port

OTHERS = ("--mega-port", "--rsio-port", "--sbp-port", "--metrics-port", "--http-port")


def test_every_listener_answers_once_the_rabbitmq_port_does(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    for _ in range(3):  # a race would lose some of these
        ports = {flag: free_port() for flag in OTHERS}
        b = broker_factory(extra_args=[a for flag, p in ports.items() for a in (flag, str(p))])
        for port in ports.values():  # one attempt each: open now or never was
            with socket.create_connection((b.host, port), timeout=10):
                pass
        b.stop()


@pytest.mark.parametrize("flag, name", [("--sbp-port", "sbp"), ("--rsio-port", "rsio")])
def test_a_stream_port_taken_names_its_listener(tmp_path: Path, flag: str, name: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--host", "127.0.0.1",
                               "--port", str(free_port()), "--data-dir", str(tmp_path / "data"),
                               flag, str(port)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"cannot serve on 127.0.0.1:{port}: Address already in use ({name})" in proc.stderr
