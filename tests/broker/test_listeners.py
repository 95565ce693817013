"""Starting the broker's listeners: the RabbitMQ port opens last, so whoever waits for it (a
client, a readiness probe, the tests' BrokerProcess) finds every other listener open; a
configured port that cannot be listened on stops the broker with that listener's address."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess, distinct_ports, free_port

pytestmark = pytest.mark.process

OTHERS = ("--mega-port", "--rsio-port", "--sbp-port", "--metrics-port", "--http-port")



def test_every_listener_answers_once_the_rabbitmq_port_does(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    for _ in range(3):  # a race would lose some of these
        main, *others = distinct_ports(1 + len(OTHERS))
        ports = dict(zip(OTHERS, others, strict=True))
        b = broker_factory(port=main,
                           extra_args=[a for flag, p in ports.items() for a in (flag, str(p))])
        for flag, port in ports.items():  # one attempt each: open now or never was
            try:
                socket.create_connection((b.host, port), timeout=10).close()
            except OSError as e:
                raise AssertionError(f"{flag} {port}: {e}; the broker's log:\n"
                                     f"{b.log_text()[-3000:]}") from e
        b.stop()


@pytest.mark.parametrize("flag, name", [("--sbp-port", "sbp"), ("--rsio-port", "rsio"),
                                        ("--metrics-port", "metrics"),
                                        ("--http-port", "management API")])
def test_a_port_taken_stops_the_broker_naming_its_listener(tmp_path: Path, flag: str,
                                                          name: str) -> None:
    """A configured listener's port taken: exit 1, its address and what it is for said."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--host", "127.0.0.1",
                               "--port", str(free_port()), "--data-dir", str(tmp_path / "data"),
                               flag, str(port)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"cannot serve on 127.0.0.1:{port}: Address already in use ({name})" in proc.stderr
