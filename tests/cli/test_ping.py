"""`streamlet ping` labels what the server announces (streamlet's own version beside the
RabbitMQ version it announces), and on a port that does not speak the RabbitMQ Stream protocol
says so and what answers there (exit 1), instead of a bare protocol code."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from streamlet import __version__
from tests.support.brokers import BrokerProcess, distinct_ports

from .support import cli, stderr_line


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    root = tmp_path_factory.mktemp("ping")
    port, mega, http = distinct_ports(3)
    b = BrokerProcess(root / "data", port=port, extra_args=[
        "--mega-port", str(mega), "--http-port", str(http), "--metrics-port", "0"]).start()
    yield {"rabbitmq": port, "mega": mega, "http": http}
    b.stop()


@pytest.mark.process
def test_ping_labels_the_versions(node: dict[str, int]) -> None:
    res = cli("ping", "--port", str(node["rabbitmq"]))
    assert re.fullmatch(rf"ping 127\.0\.0\.1:{node['rabbitmq']}: streamlet {re.escape(__version__)} "
                        r"\(announcing RabbitMQ 3\.13\.0\) answered in \d+ ms\n",
                        res.stdout.decode()), res.stdout


@pytest.mark.process
@pytest.mark.parametrize("listener, found", [
    ("mega", "it answered 6 bytes that are not a frame of it (00 00 00 "),
    ("http", "an HTTP server answers there (HTTP/1.1 404 Not Found): a management API or "
             "metrics port?"),
])
def test_ping_another_protocols_port(node: dict[str, int], listener: str, found: str) -> None:
    port = node[listener]
    res = cli("ping", "--port", str(port), "--timeout", "3", check=False)
    assert res.returncode == 1
    line = stderr_line(res.stderr)
    assert line.startswith(f"streamlet: 127.0.0.1:{port} does not speak the RabbitMQ Stream "
                           f"protocol: {found}"), line


@pytest.mark.parametrize("props, line", [
    ({"product": "streamlet", "version": "3.13.0", "streamlet_version": "0.1.0"},
     "streamlet 0.1.0 (announcing RabbitMQ 3.13.0)"),
    ({"product": "RabbitMQ", "version": "3.13.7"}, "RabbitMQ 3.13.7"),
    ({"product": "RabbitMQ"}, "RabbitMQ"),
    ({}, "a server without a product name"),
])
def test_server_line(props: dict[str, str], line: str) -> None:
    from streamlet.cli.rabbitmq.ping import server_line

    assert server_line(props) == line


@pytest.mark.parametrize("handshake, http, found", [
    (b"\x00\x00\x00\x10\x80\x11\x00\x01", b"", None),  # a PeerPropertiesResponse
    (b"", b"HTTP/1.0 200 OK\r\nServer: nginx\r\n\r\n",
     "an HTTP server answers there (HTTP/1.0 200 OK, nginx): a management API or metrics port?"),
    (b"\x15\x03\x03\x00\x02\x02\x46", b"", "a TLS listener answers there: add --tls"),
    (b"AMQP\x00\x00\x09\x01", b"", "an AMQP listener answers there (RabbitMQ's AMQP port; its "
                                   "stream port is 5552)"),
    (b"\x00\x00\x00\x25\x00\x02", b"", "it answered 6 bytes that are not a frame of it "
                                       "(00 00 00 25 00 02)"),
    (b"\x04\x01" + b"frame too large here" + b"\x00", b"",
     "it answered 23 bytes that are not a frame of it (04 01 66 72 61 6d 65 20 74 6f 6f 20 6c "
     "61 72 67 ...), saying 'frame too large here'"),
    (b"", b"", "no answer to its handshake"),
])
def test_identify(handshake: bytes, http: bytes, found: str | None) -> None:
    from streamlet.cli.rabbitmq.ping import identify

    assert identify(handshake, http) == found
