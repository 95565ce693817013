"""Idle sockets and connection budgets against real broker processes on loopback: a MEGA, RSIO or
SBP connection that sends no complete first frame within server.handshake_timeout is closed, one
silent with nothing outstanding for its listener's idle_timeout too, while a subscriber or a
long poll waiting on the broker is not; and silent sockets on an unauthenticated protocol take
only their listener's budget, never the slots of the authenticated RabbitMQ listener."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamlet.client import connect
from streamlet.client.mega import MegaClient
from streamlet.client.rsio import RsioClient
from streamlet.client.sbp import SbpClient
from streamlet.mega import MessageType
from streamlet.mega.codec import encode_request
from streamlet.rsio import EXT_OFFSETS, VERSION, Hello
from streamlet.rsio import encode as rsio_encode
from streamlet.sbp import Opcode
from streamlet.sbp.frame import encode as sbp_encode
from tests.support.brokers import BrokerProcess, PortTaken, distinct_ports
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

PROTOCOLS = ("mega", "rsio", "sbp")
HANDSHAKE_S = 2
IDLE_S = 1
#: a complete first frame of each protocol (RSIO's must be its hello)
FIRST_FRAME = {
    "mega": encode_request(1, MessageType.CREATE_TOPIC, b"idle-topic", 0),
    "rsio": rsio_encode(Hello(VERSION, (EXT_OFFSETS,))),
    "sbp": sbp_encode(Opcode.PING, 0, 1),
}
#: the start of a frame, never completed
PARTIAL_FRAME = {"mega": b"\x00\x00\x00\x01\x03", "rsio": b"\x20\x01", "sbp": b"\x00\x00\x00\x40"}


def _start(make: Callable[..., BrokerProcess], tmp_path: Path, extra: str = "",
           listener: str = "") -> tuple[BrokerProcess, dict[str, int]]:
    """A broker with the three unauthenticated listeners, the ports by protocol (chosen again
    when another test took one of them before the broker could)."""
    attempt = 0
    while True:
        ports = dict(zip(PROTOCOLS, distinct_ports(3), strict=True))
        cfg = tmp_path / f"idle{attempt}.toml"
        cfg.write_text(extra + "".join(f"[listeners.{p}]\nport = {port}\n{listener}"
                                       for p, port in ports.items()))
        try:
            broker = make(config=cfg)
            broker.wait_listening(ports.values())
            return broker, ports
        except PortTaken:
            attempt += 1
            if attempt == 3:
                raise


@pytest.fixture
def idle_broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path
                ) -> tuple[BrokerProcess, dict[str, int]]:
    return _start(broker_factory, tmp_path, f"[server]\nhandshake_timeout = {HANDSHAKE_S}\n",
                  f"idle_timeout = {IDLE_S}\n")


@pytest.fixture
def handshake_broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path
                     ) -> tuple[BrokerProcess, dict[str, int]]:
    """The listeners with their default idle timeout: only the first frame's deadline is short."""
    return _start(broker_factory, tmp_path, f"[server]\nhandshake_timeout = {HANDSHAKE_S}\n")


async def _closed(reader: asyncio.StreamReader, timeout: float = 30.0) -> None:
    """Read (and drop) until the broker closes the connection; fail after ``timeout``."""
    async with asyncio.timeout(timeout):
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass


async def _open(port: int, first: bytes = b"") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if first:
        writer.write(first)
        await writer.drain()
    return reader, writer


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("sent", ["nothing", "part of a frame"])
async def test_no_first_frame_within_the_handshake_deadline_is_closed(
        handshake_broker: tuple[BrokerProcess, dict[str, int]], protocol: str, sent: str) -> None:
    broker, ports = handshake_broker
    t0 = time.monotonic()
    reader, writer = await _open(ports[protocol], PARTIAL_FRAME[protocol] if sent != "nothing" else b"")
    await _closed(reader)
    assert time.monotonic() - t0 >= HANDSHAKE_S * 0.9  # the deadline, not something else
    writer.close()
    assert "no complete first frame" in broker.log_text()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_silent_after_its_first_frame_is_closed_once_idle(
        idle_broker: tuple[BrokerProcess, dict[str, int]], protocol: str) -> None:
    broker, ports = idle_broker
    t0 = time.monotonic()
    reader, writer = await _open(ports[protocol], FIRST_FRAME[protocol])
    await _closed(reader)
    assert time.monotonic() - t0 >= IDLE_S * 0.9
    writer.close()
    assert f"{protocol} connection" in broker.log_text() and "idle for" in broker.log_text()


async def test_waiting_consumers_are_not_cut(
        idle_broker: tuple[BrokerProcess, dict[str, int]]) -> None:
    """An RSIO subscriber waiting for the stream to grow, an SBP FETCH long poll longer than the
    idle timeout and a MEGA client polling CONSUME stay open while a silent connection opened
    beside them is closed as idle; then each still gets what is published."""
    broker, ports = idle_broker
    async with await connect(broker.host, broker.port) as c:
        await c.create_stream("idle-s")
    rsio = await RsioClient.connect(broker.host, ports["rsio"])
    subscription = await rsio.subscribe("idle-s", offset="first")
    elements = aiter(subscription)
    sbp = await SbpClient.connect(broker.host, ports["sbp"])
    fetch = asyncio.ensure_future(sbp.fetch("idle-s", 0, max_wait_ms=60_000, min_bytes=1))
    mega = await MegaClient.connect(broker.host, ports["mega"])
    polls = 0

    async def poll() -> None:  # a MEGA consumer asks again and again for offset 0
        nonlocal polls
        while True:
            try:
                await mega.consume("idle-s", 0)
                return
            except Exception:  # INVALID_OFFSET until it is there
                polls += 1
                await asyncio.sleep(0.2)

    polling = asyncio.ensure_future(poll())
    control_reader, control = await _open(ports["mega"], FIRST_FRAME["mega"])
    await _closed(control_reader)  # the idle timeout passed
    # and a few more of it, measured by a second control (not by a sleep)
    again_reader, again = await _open(ports["sbp"], FIRST_FRAME["sbp"])
    await _closed(again_reader)
    control.close()
    again.close()
    assert not fetch.done() and not polling.done() and polls > 0
    async with await connect(broker.host, broker.port) as c:
        producer = await c.producer("idle-s")
        await producer.send_many([b"after the idle timeout"])
        await producer.flush()
    first = await asyncio.wait_for(anext(elements), 30)
    assert first.body == b"after the idle timeout"
    got = await asyncio.wait_for(fetch, 30)
    assert got and got[0][0] == 0
    await asyncio.wait_for(polling, 30)
    assert await sbp.ping(b"still here") == b"still here"
    for client in (rsio, sbp, mega):
        await client.close()


@pytest.mark.parametrize(("listener", "kept"), [("", 2), ("max_connections = 5\n", 5)])
async def test_silent_sockets_take_their_listeners_budget_only(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path, listener: str,
        kept: int) -> None:
    """limits.max_connections = 20: 40 silent MEGA sockets keep their listener's budget (a
    tenth of 20, or as configured) and every other is closed at once; an authenticated
    RabbitMQ client still connects and works; once they close, MEGA takes connections again."""
    broker, ports = _start(broker_factory, tmp_path,
                           "[limits]\nmax_connections = 20\n[server]\nhandshake_timeout = 600\n",
                           listener)
    silent = [await _open(ports["mega"]) for _ in range(40)]
    closed = await asyncio.gather(*(_closed(r, 30) for r, _ in silent[kept:]),
                                  return_exceptions=True)
    assert not [e for e in closed if e is not None]  # every one past the budget was closed
    held = silent[:kept]
    for reader, _ in held:  # and those within it are open
        assert not reader.at_eof()
    async with await connect(broker.host, broker.port) as c:
        await c.create_stream("budget-s")
        producer = await c.producer("budget-s")
        await producer.send_many([b"in spite of the silent sockets"])
        await producer.flush()
    for _, writer in silent:
        writer.close()
    mega = await eventually(lambda: _try_mega(ports["mega"]), 30, "a MEGA connection taken again")
    await mega.create_topic("budget-t")
    await mega.close()
    assert "its protocol has" in broker.log_text()


async def _try_mega(port: int) -> MegaClient | None:
    """A MEGA client whose first request is answered, or None (refused: the budget is full)."""
    client = await MegaClient.connect("127.0.0.1", port)
    try:
        await asyncio.wait_for(client.consume("budget-s", 0), 5)
    except (ConnectionError, TimeoutError):  # closed at once: still full
        await client.close()
        return None
    return client
