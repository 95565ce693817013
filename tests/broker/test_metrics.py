"""The broker's /metrics: a real broker process, rstream publishing and consuming, real HTTP
scrapes read with prometheus_client's parser."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from rstream import Consumer as RConsumer
from rstream import ConsumerOffsetSpecification, OffsetType, RawMessage
from rstream import Producer as RProducer

from tests.support.brokers import BrokerProcess, free_port, holding
from tests.support.scrape import Samples, scrape, scrape_text, value
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

N = 5000
BODY = 100
ENTRY = 4 + BODY  # a simple entry: its 4-byte size, then the message


def metrics_broker(broker_factory: Callable[..., BrokerProcess], *args: str,
                   config: Path | None = None) -> tuple[BrokerProcess, int]:
    port = free_port()
    return broker_factory(extra_args=["--metrics-port", str(port), *args], config=config), port


def producer(b: BrokerProcess) -> RProducer:
    return RProducer(b.host, b.port, username="guest", password="guest")


def consumer(b: BrokerProcess) -> RConsumer:
    return RConsumer(b.host, b.port, username="guest", password="guest")


def stream_value(samples: Samples, name: str, stream: str) -> float | None:
    return value(samples, name, vhost="/", stream=stream)


async def test_scraped_counters_equal_what_was_published_and_consumed(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b, port = metrics_broker(broker_factory)
    stream = "orders"
    confirmed = 0
    done = asyncio.Event()

    def on_confirm(status: object) -> None:
        nonlocal confirmed
        confirmed += 1
        if confirmed == N:
            done.set()

    async with producer(b) as p:
        await p.create_stream(stream)
        for _ in range(0, N, 500):
            await p.send_batch(stream, [RawMessage(b"x" * BODY) for _ in range(500)],
                               on_publish_confirm=on_confirm)
        await asyncio.wait_for(done.wait(), 60)
        during = await scrape(port)
        assert value(during, "streamlet_publishers", protocol="rabbitmq") == 1
        assert value(during, "streamlet_connections", protocol="rabbitmq") >= 1  # type: ignore[operator]
        assert stream_value(during, "streamlet_stream_publishers", stream) == 1
    samples = await scrape(port)
    assert stream_value(samples, "streamlet_stream_messages_in_total", stream) == N
    assert stream_value(samples, "streamlet_stream_bytes_in_total", stream) == N * ENTRY
    assert stream_value(samples, "streamlet_stream_confirmed_total", stream) == N
    assert stream_value(samples, "streamlet_stream_committed_offset", stream) == N - 1
    assert stream_value(samples, "streamlet_stream_committed_chunk_id", stream) >= 0  # type: ignore[operator]
    assert stream_value(samples, "streamlet_stream_segments", stream) == 1
    assert stream_value(samples, "streamlet_stream_disk_bytes", stream) > N * ENTRY  # type: ignore[operator]
    assert stream_value(samples, "streamlet_stream_writable", stream) == 1
    # one latency sample per chunk, not per message
    chunks = value(samples, "streamlet_publish_confirm_seconds_count")
    assert chunks is not None and 1 <= chunks < N
    assert value(samples, "streamlet_publish_confirm_seconds_bucket", le="+Inf") == chunks
    assert value(samples, "streamlet_publish_confirm_seconds_sum") > 0  # type: ignore[operator]
    await eventually(lambda: _publishers_gone(port), what="publisher gone from the scrape")

    got = 0
    all_in = asyncio.Event()

    async def on_message(msg: bytes, ctx: object) -> None:
        nonlocal got
        got += 1
        if got == N:
            all_in.set()

    async with consumer(b) as c:
        await c.subscribe(stream, on_message, decoder=lambda x: x,
                          offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await asyncio.wait_for(all_in.wait(), 60)
        during = await scrape(port)
        assert value(during, "streamlet_consumers", protocol="rabbitmq") == 1
        assert stream_value(during, "streamlet_stream_consumers", stream) == 1
        assert stream_value(during, "streamlet_stream_messages_out_total", stream) == N
        # chunks go out whole: their headers (and nothing else) on top of the entries
        out = stream_value(during, "streamlet_stream_bytes_out_total", stream)
        assert out is not None and N * ENTRY < out <= N * ENTRY + 64 * chunks


async def _publishers_gone(port: int) -> bool:
    return value(await scrape(port), "streamlet_publishers", protocol="rabbitmq") == 0


async def test_consumer_offset_and_lag(broker_factory: Callable[..., BrokerProcess]) -> None:
    b, port = metrics_broker(broker_factory)
    stream = "events"
    async with producer(b) as p:
        await p.create_stream(stream)
        await p.send_batch(stream, [RawMessage(b"%d" % i) for i in range(100)])
    labels = {"vhost": "/", "stream": stream, "consumer": "billing"}

    async def seen() -> tuple[float | None, float | None]:
        s = await scrape(port)
        return value(s, "streamlet_consumer_offset", **labels), value(
            s, "streamlet_consumer_lag", **labels)

    async with consumer(b) as c:
        await c.subscribe(stream, lambda m, ctx: None, subscriber_name="billing",
                          offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await c.store_offset(stream=stream, subscriber_name="billing", offset=39)
        # the last message is offset 99: 60 after the stored one
        await eventually(lambda: _equal(seen(), (39, 60)), what="offset 39, lag 60")
        async with producer(b) as p:
            await p.send_batch(stream, [RawMessage(b"more") for _ in range(10)])
        # the tracking chunk of the store took offset 100, the new messages 101..110: lag is
        # counted in offsets, as RabbitMQ's offset lag is
        await eventually(lambda: _equal(seen(), (39, 71)), what="lag 71 after 10 more")
        await c.store_offset(stream=stream, subscriber_name="billing", offset=110)
        await eventually(lambda: _equal(seen(), (110, 0)), what="caught up: lag 0")


async def _equal(got: object, want: tuple[int, int]) -> bool:
    return await got == want  # type: ignore[misc]


async def test_label_cardinality_is_capped(broker_factory: Callable[..., BrokerProcess],
                                           tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "streamlet.toml"
    config.write_text(f"[listeners.metrics]\nport = {port}\nmax_streams = 2\nmax_consumers = 1\n")
    b = broker_factory(config=config)
    async with producer(b) as p:
        for name in ("a", "b", "c"):
            await p.create_stream(name)
            await p.send_batch(name, [RawMessage(b"m")])
    for ref in ("r1", "r2"):  # rstream subscribes a consumer once per stream
        async with consumer(b) as c:
            for name in ("a", "b"):
                await c.subscribe(name, lambda m, ctx: None, subscriber_name=ref)
                await c.store_offset(stream=name, subscriber_name=ref, offset=0)
    samples = await eventually(lambda: _with_offsets(port), what="stored offsets scraped")
    listed = {dict(labels)["stream"] for name, labels in samples
              if name == "streamlet_stream_messages_in_total"}
    assert listed == {"a", "b"}  # the first two by name
    consumers = [dict(labels) for name, labels in samples if name == "streamlet_consumer_lag"]
    assert consumers == [{"vhost": "/", "stream": "a", "consumer": "r1"}]
    assert value(samples, "streamlet_metrics_omitted", kind="streams") == 1
    assert value(samples, "streamlet_metrics_omitted", kind="consumers") == 3
    assert value(samples, "streamlet_streams", vhost="/") == 3  # totals count everything


async def _with_offsets(port: int) -> Samples | None:
    s = await scrape(port)
    return s if value(s, "streamlet_metrics_omitted", kind="consumers") == 3 else None


async def test_connections_are_counted_per_protocol(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    rsio = free_port()
    b, port = metrics_broker(broker_factory, "--rsio-port", str(rsio))
    with socket.create_connection((b.host, rsio)):
        samples = await eventually(lambda: _rsio_connected(port), what="an RSIO connection")
        assert value(samples, "streamlet_connections", protocol="rabbitmq") == 0
    await eventually(lambda: _rsio_gone(port), what="the RSIO connection gone")


async def _rsio_connected(port: int) -> Samples | None:
    s = await scrape(port)
    return s if value(s, "streamlet_connections", protocol="rsio") == 1 else None


async def _rsio_gone(port: int) -> bool:
    return value(await scrape(port), "streamlet_connections", protocol="rsio") == 0


def _status(url: str, method: str = "GET") -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_http_answers(broker_factory: Callable[..., BrokerProcess]) -> None:
    b, port = metrics_broker(broker_factory)
    base = f"http://{b.host}:{port}"
    status, body = _status(base + "/metrics")
    assert status == 200 and b"# TYPE streamlet_connections gauge" in body
    assert "process_resident_memory_bytes" in scrape_text(port)  # the process's own
    assert _status(base + "/metrics", "HEAD") == (200, b"")
    assert _status(base + "/metrics", "POST")[0] == 405
    assert _status(base + "/nope")[0] == 404
    # a peer that sends an endless header line is cut off, the endpoint keeps serving
    with socket.create_connection((b.host, port)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000)
        s.settimeout(10)
        try:
            got = s.recv(1)
        except ConnectionResetError:
            got = b""
        assert got == b""  # closed, unanswered
    assert _status(base + "/metrics")[0] == 200


def logged(b: BrokerProcess, text: str, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in b.log_text():
            return True
        time.sleep(0.05)
    return False


def test_the_default_port_taken_is_skipped(broker_factory: Callable[..., BrokerProcess]) -> None:
    """Two brokers on one machine both start; the second logs that it has no metrics."""
    with holding(15692):
        b = broker_factory()
        assert logged(b, "no metrics endpoint: cannot listen on 127.0.0.1:15692")
        assert b.alive()


def test_metrics_port_zero_turns_it_off(broker_factory: Callable[..., BrokerProcess],
                                        tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "streamlet.toml"
    config.write_text(f"[listeners.metrics]\nport = {port}\n")
    b = broker_factory(config=config, extra_args=["--metrics-port", "0"])  # the flag wins
    assert logged(b, "no metrics endpoint (turned off)")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((b.host, port), timeout=5).close()
