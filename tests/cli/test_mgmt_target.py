"""The management API commands talk to the broker at --host/--port: they find its API's port
from the broker itself (its PeerProperties answer), never another broker's on 15672; a 404
names what is missing. Two real brokers, each with its API on a port of its own."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streamlet.cli.mgmt import ApiError, api_port, stream_ports
from tests.support.brokers import BrokerProcess, distinct_ports

from .support import cli, conn, stderr_line


def _names(out: bytes) -> list[str]:
    return [line.split()[1] for line in out.decode().splitlines()[1:]]


@pytest.mark.process
def test_the_lists_are_the_brokers_at_port(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    http_a, http_b = distinct_ports(2)
    a = broker_factory(extra_args=["--http-port", str(http_a), "--metrics-port", "0"])
    b = broker_factory(extra_args=["--http-port", str(http_b), "--metrics-port", "0"])
    cli(*conn(a), "streams", "create", "only-on-a")
    cli(*conn(b), "streams", "create", "only-on-b")
    assert _names(cli(*conn(b), "streams", "list").stdout) == ["only-on-b"]
    assert _names(cli(*conn(a), "streams", "list").stdout) == ["only-on-a"]
    # --http-port stays an override: B's address, A's API
    assert _names(cli(*conn(b), "streams", "list", "--http-port", str(http_a)).stdout) == [
        "only-on-a"]
    missing = cli(*conn(b), "consumers", "list", "--stream", "nowhere", check=False)
    assert missing.returncode == 1
    assert stderr_line(missing.stderr) == (
        f"streamlet: no stream 'nowhere' in virtual host '/' on 127.0.0.1:{b.port}")
    vhost = cli(*conn(b), "publishers", "list", "--vhost", "nov", check=False)
    assert stderr_line(vhost.stderr) == f"streamlet: no virtual host 'nov' on 127.0.0.1:{b.port}"
    gone = cli(*conn(b), "connections", "close", "1.2.3.4:5 -> 6.7.8.9:10", check=False)
    assert gone.returncode == 1 and stderr_line(gone.stderr) == (
        f"streamlet: no connection '1.2.3.4:5 -> 6.7.8.9:10' on 127.0.0.1:{b.port} ('streamlet "
        "connections list' shows their names)")


@pytest.mark.process
def test_a_broker_without_the_api_says_so(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(extra_args=["--http-port", "0", "--metrics-port", "0"])
    res = cli(*conn(b), "streams", "list", check=False)
    assert res.returncode == 1
    assert stderr_line(res.stderr) == (
        f"streamlet: the broker at 127.0.0.1:{b.port} serves no management API (serve "
        "--http-port P, or [listeners.http], turns it on)")


@pytest.mark.parametrize("properties, found", [
    ({"product": "streamlet", "streamlet_http_port": "15673"}, (15673, False)),
    ({"product": "RabbitMQ", "version": "3.13.0"}, (15672, True)),  # checked by its overview
    ({}, (15672, True)),
    ({"product": "streamlet"}, (15672, True)),  # one from before the announcement
    ({"product": "streamlet", "streamlet_http_port": "0"}, "serves no management API"),
    ({"product": "streamlet", "streamlet_http_port": "x"}, "not a port"),
    ({"product": "streamlet", "streamlet_http_port": "70000"}, "not a port"),
    ({"product": "streamlet", "streamlet_http_port": "0", "streamlet_https_port": "15671"},
     "over HTTPS only \\(port 15671\\): give --tls"),
])
def test_api_port(properties: dict[str, str], found: tuple[int, bool] | str) -> None:
    if isinstance(found, str):
        with pytest.raises(ApiError, match=found):
            api_port(properties, "h", 5552)
    else:
        assert api_port(properties, "h", 5552) == found


@pytest.mark.parametrize("properties, found", [
    ({"product": "streamlet", "streamlet_http_port": "0", "streamlet_https_port": "15671"},
     (15671, False)),
    ({"product": "streamlet", "streamlet_http_port": "15672", "streamlet_https_port": "9671"},
     (9671, False)),
    ({"product": "RabbitMQ"}, (15671, True)),  # RabbitMQ's management.ssl.port, checked
    ({"product": "streamlet", "streamlet_http_port": "15672"}, "plain HTTP only \\(port 15672\\)"),
    ({"product": "streamlet", "streamlet_http_port": "0"}, "serves no management API"),
    ({"product": "streamlet", "streamlet_http_port": "0", "streamlet_https_port": "y"},
     "announced streamlet_https_port='y', not a port"),
])
def test_api_port_over_tls(properties: dict[str, str], found: tuple[int, bool] | str) -> None:
    """With --tls: the HTTPS port the broker announces."""
    if isinstance(found, str):
        with pytest.raises(ApiError, match=found):
            api_port(properties, "h", 5551, tls=True)
    else:
        assert api_port(properties, "h", 5551, tls=True) == found


@pytest.mark.parametrize("overview, ports", [
    ({"listeners": [{"protocol": "stream", "port": 5552}, {"protocol": "http", "port": 15672},
                    {"protocol": "stream/ssl", "port": 5551}, {"protocol": "amqp", "port": 5672}]},
     [5551, 5552]),
    ({"listeners": [{"protocol": "stream", "port": "5553"}]}, [5553]),
    ({"listeners": [{"protocol": "stream"}, "junk"]}, []),
    ({}, []),
    ([], []),
])
def test_stream_ports(overview: object, ports: list[int]) -> None:
    assert stream_ports(overview) == ports
