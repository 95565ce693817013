"""The client's handshake machine against the broker's real connection, in process, with no
socket: the connection comes from the broker's LISTENERS table and writes to a fake transport;
the machine's frames go in through ``data_received``, what the connection wrote goes back to the
machine. The loop runs only for the broker's timers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from streamlet.broker.protocols import LISTENERS, load
from streamlet.broker.server import Broker
from streamlet.rabbitmq import Code, FrameSplitter
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.client import ClientHandshake, HandshakeFailed, Opened, State
from streamlet.storage.chunk import simple_entry
from tests.support.fakes import FakeTransport


class Wire:
    """One server connection and its fake transport, spoken to in frames."""

    def __init__(self, broker: Broker) -> None:
        # the factory's type is the BaseProtocol a listener needs; the RabbitMQ one is a Protocol
        self.conn = cast(asyncio.Protocol, LISTENERS["rabbitmq"](broker, False))
        self.transport = FakeTransport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.splitter = FrameSplitter()
        self.pending: list[f.Command | f.FrameError] = []

    def send(self, cmds: list[f.Command]) -> None:
        if cmds:
            self.conn.data_received(b"".join(f.encode(c) for c in cmds))

    def received(self) -> list[f.Command | f.FrameError]:
        """Every frame the connection wrote since the last call, decoded."""
        out = [*self.pending, *(f.decode(fr) for fr in self.splitter.feed(self.transport.take()))]
        self.pending = []
        return out

    async def recv(self, kind: type[f.Command]) -> f.Command:
        """The next frame of ``kind``, letting the loop run (bounded) until it is written."""
        async with asyncio.timeout(10):
            while True:
                frames = self.received()
                for i, cmd in enumerate(frames):
                    if isinstance(cmd, kind):
                        self.pending = frames[i + 1 :]
                        return cmd
                    assert isinstance(cmd, f.Heartbeat), cmd
                await asyncio.sleep(0.001)

    def handshake(self, hs: ClientHandshake) -> Opened:
        """Drive ``hs`` to its end: the server answers within ``data_received``, no loop turn."""
        self.send(hs.start())
        while hs.opened is None:
            frames = self.received()
            assert frames, f"the server wrote nothing; the machine waits for {hs.waiting_for}"
            for i, cmd in enumerate(frames):
                self.send(hs.receive(cmd))
                if hs.opened is not None:
                    self.pending = frames[i + 1 :]
                    break
        return hs.opened

    def close(self) -> None:
        self.conn.connection_lost(None)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    cfg = load(data_dir=tmp_path / "data")
    b = Broker(cfg, LISTENERS)  # never started: no listening socket
    yield b
    for vhost in b.vhosts.values():
        vhost.close()


@pytest.fixture
async def wire(broker: Broker) -> AsyncIterator[Wire]:
    w = Wire(broker)
    yield w
    w.close()


def client(**kwargs: Any) -> ClientHandshake:
    return ClientHandshake(properties={"product": "in-process"}, **kwargs)


async def test_plain_login_opens_with_negotiated_values(wire: Wire) -> None:
    opened = wire.handshake(client(frame_max=65536, heartbeat=30))
    assert (opened.frame_max, opened.heartbeat) == (65536, 30)
    assert opened.server_properties["product"] == "streamlet"
    assert opened.connection_properties["advertised_host"] == "127.0.0.1"
    assert not wire.transport.closed


async def test_no_preference_takes_the_servers_values(wire: Wire, broker: Broker) -> None:
    opened = wire.handshake(client())
    assert (opened.frame_max, opened.heartbeat) == (broker.config.frame_max, broker.config.heartbeat)


async def test_wrong_password_fails_with_the_servers_code(wire: Wire) -> None:
    with pytest.raises(HandshakeFailed) as e:
        wire.handshake(client(password="wrong"))
    assert e.value.code == Code.AUTHENTICATION_FAILURE
    assert e.value.state is State.SASL_AUTHENTICATE
    assert wire.transport.closed


async def test_unknown_vhost_is_refused(wire: Wire) -> None:
    with pytest.raises(HandshakeFailed) as e:
        wire.handshake(client(vhost="/nope"))
    assert e.value.code == Code.VIRTUAL_HOST_ACCESS_FAILURE
    assert str(e.value) == "Open of virtual host '/nope' refused: VIRTUAL_HOST_ACCESS_FAILURE (12)"


async def test_external_is_not_offered_without_tls(wire: Wire) -> None:
    with pytest.raises(HandshakeFailed) as e:
        wire.handshake(client(mechanism="EXTERNAL"))
    assert e.value.code == Code.SASL_MECHANISM_NOT_SUPPORTED


async def test_a_server_close_mid_handshake_fails_with_its_code(wire: Wire) -> None:
    hs = client()
    wire.send(hs.start())
    for cmd in wire.received():
        wire.send(hs.receive(cmd))  # the PeerPropertiesResponse: SaslHandshake sent
    wire.send([f.Open(99, "/")])  # out of order: the server closes
    with pytest.raises(HandshakeFailed) as e:
        for cmd in wire.received():
            hs.receive(cmd)
    assert e.value.code == Code.ACCESS_REFUSED and e.value.closed_by_server
    assert wire.transport.closed


async def test_create_publish_confirm_after_open(wire: Wire) -> None:
    hs = client()
    wire.handshake(hs)
    corr = hs.correlation
    wire.send([f.Create(corr + 1, "in-process", {})])
    created = await wire.recv(f.CreateResponse)
    assert created.code == Code.OK  # type: ignore[attr-defined]
    wire.send([f.DeclarePublisher(corr + 2, 1, "", "in-process")])
    declared = await wire.recv(f.DeclarePublisherResponse)
    assert declared.code == Code.OK  # type: ignore[attr-defined]
    wire.send([f.Publish(1, [f.PublishedMessage(i, simple_entry(b"m%d" % i)) for i in (1, 2)])])
    confirmed = await wire.recv(f.PublishConfirm)
    assert isinstance(confirmed, f.PublishConfirm) and confirmed.publishing_ids == [1, 2]
