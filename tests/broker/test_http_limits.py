"""The broker's HTTP listeners (the management API, /metrics) against a real broker process: a
request body past its limit is answered 413 (the client reads the answer, not a reset), and
each listener holds a budget of connections of its own: silent HTTP sockets past it are turned
away at once, and take none of the stream listeners' connections."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest
import requests

from streamlet.broker.http.server import BODY_LIMIT, MAX_CONNECTIONS
from streamlet.client import connect
from tests.support.brokers import BrokerProcess, distinct_ports, wait_for_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

GUEST = ("guest", "guest")


@pytest.fixture
def http_broker(broker_factory: Callable[..., BrokerProcess]) -> tuple[BrokerProcess, int, int]:
    http, metrics = distinct_ports(2)
    b = broker_factory(extra_args=["--http-port", str(http), "--metrics-port", str(metrics)])
    wait_for_port(b.host, http, proc=b.proc)
    wait_for_port(b.host, metrics, proc=b.proc)
    return b, http, metrics


@pytest.mark.parametrize("size", [BODY_LIMIT + 1, 1 << 20, 4 << 20])
def test_a_body_past_its_limit_is_answered_413(http_broker: tuple[BrokerProcess, int, int],
                                               size: int) -> None:
    broker, http, _ = http_broker
    r = requests.put(f"http://127.0.0.1:{http}/api/vhosts/x", data=b"x" * size, auth=GUEST,
                     timeout=30)
    assert r.status_code == 413, r.text
    assert str(BODY_LIMIT) in r.text
    # and the listener goes on answering
    assert requests.get(f"http://127.0.0.1:{http}/api/overview", auth=GUEST,
                        timeout=10).status_code == 200
    assert broker.alive()


def test_a_body_within_its_limit_is_read(http_broker: tuple[BrokerProcess, int, int]) -> None:
    _, http, metrics = http_broker
    r = requests.post(f"http://127.0.0.1:{metrics}/metrics", data=b"x" * BODY_LIMIT, timeout=30)
    assert r.status_code == 405  # read, then answered: /metrics takes GET only


def test_chunked_bodies_are_refused_with_411(http_broker: tuple[BrokerProcess, int, int]) -> None:
    _, http, _ = http_broker
    r = requests.put(f"http://127.0.0.1:{http}/api/vhosts/x", auth=GUEST, timeout=30,
                     data=iter([b"x" * 1000] * 100))  # a generator: sent chunked
    assert r.status_code == 411


async def test_http_connections_have_a_budget_of_their_own(
        http_broker: tuple[BrokerProcess, int, int]) -> None:
    broker, http, metrics = http_broker
    for port in (http, metrics):
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_CONNECTIONS)]
        # the next one is answered 503 and closed at once, not after the head's 10 s timeout
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answer = await asyncio.wait_for(reader.read(), 5)
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        writer.close()
        # the stream listener is untouched: an authenticated client connects and works
        async with await connect(broker.host, broker.port) as c:
            await c.create_stream(f"http-budget-{port}")
        for _, w in held:
            w.close()
    # once they are closed, the listener answers again (polled: the broker sees them close)
    def overview() -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{http}/api/overview", auth=GUEST,
                                timeout=10).status_code == 200
        except requests.ConnectionError:
            return False
    await eventually(lambda: asyncio.to_thread(overview), 30, "the API answering again")


def test_a_raw_oversized_body_gets_the_answer_before_the_close(
        http_broker: tuple[BrokerProcess, int, int]) -> None:
    """Over a plain socket: the whole body sent, then the answer read: a 413, no reset."""
    _, http, _ = http_broker
    size = 2 << 20
    with socket.create_connection(("127.0.0.1", http), timeout=30) as s:
        s.sendall(f"POST /api/definitions HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n"
                  .encode() + b"y" * size)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert got.startswith(b"HTTP/1.1 413 Payload Too Large\r\n"), got[:100]
