"""A minimal asyncio peer of the RabbitMQ Stream protocol for the phases that need raw frames
(the fuzzer's handshakes, the 10,000 held connections): the project's client would cost a
Client with its timers per connection, and cannot send what no client would."""

from __future__ import annotations

import asyncio
import contextlib
import struct

from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.client import ClientHandshake, HandshakeFailed

HOST = "127.0.0.1"


class PeerClosed(ConnectionError):
    """The broker closed the connection (or reset it)."""


class Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.corr = 0

    @classmethod
    async def connect(cls, port: int, timeout: float = 30.0) -> Peer:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout)
        return cls(reader, writer)

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr

    def send(self, cmd: f.Command) -> None:
        self.writer.write(f.encode(cmd))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def read_frame(self) -> bytes:
        """One frame without its size prefix; PeerClosed at EOF or reset."""
        try:
            size = struct.unpack(">I", await self.reader.readexactly(4))[0]
            return await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            raise PeerClosed(str(e)) from e

    async def recv_until(self, cls: type[f.Command], timeout: float = 30.0) -> f.Command:
        """Frames up to the first ``cls`` (heartbeats and others skipped); a Close raises."""
        async with asyncio.timeout(timeout):
            while True:
                cmd = f.decode(await self.read_frame())
                if isinstance(cmd, cls):
                    return cmd
                if isinstance(cmd, f.Close):
                    raise PeerClosed(f"broker sent Close {cmd.code} {cmd.reason!r}")

    async def request(self, cmd: f.Command, response: type[f.Command], timeout: float = 30.0) -> f.Command:
        self.send(cmd)
        return await self.recv_until(response, timeout)

    async def handshake(self, heartbeat: int = 0, timeout: float = 30.0) -> None:
        """PeerProperties, SaslHandshake, SaslAuthenticate PLAIN guest/guest, Tune, Open, by the
        client handshake machine. ``heartbeat`` is what we answer to Tune (0: none on this
        connection), the broker's frame_max."""
        hs = ClientHandshake(properties={"product": "streamlet-soak"},
                             heartbeat=heartbeat or None, correlation=self.corr)
        try:
            async with asyncio.timeout(timeout):
                for cmd in hs.start():
                    self.send(cmd)
                while hs.opened is None:
                    for cmd in hs.receive_frame(await self.read_frame()):
                        self.send(cmd)
        except HandshakeFailed as e:
            raise PeerClosed(str(e)) from e
        finally:
            self.corr = hs.correlation

    def abort(self) -> None:
        """Close without waiting (a reset if anything is unread)."""
        self.writer.transport.abort()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(self.writer.wait_closed(), 5)


async def fresh_handshake(port: int, timeout: float = 30.0) -> None:
    """The check after a phase: a new connection handshakes and gets a Metadata answer."""
    peer = await Peer.connect(port, timeout)
    try:
        await peer.handshake(timeout=timeout)
        await peer.request(f.Metadata(peer.next_corr(), ["soak-probe"]), f.MetadataResponse, timeout)
    finally:
        peer.abort()
