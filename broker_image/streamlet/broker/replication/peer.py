"""A broker's own connection to another broker (a follower to its leader, a broker creating a
stream's members on its peers): asyncio streams, the client's handshake machine, frames in and
out. No heartbeats: each side's liveness is the placement driver's business."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

from ...protocol import frames as f
from ...rabbitmq.client import ClientHandshake
from ..directory import Address

_SIZE = struct.Struct(">I")
#: the largest frame a peer sends (a leader's run of chunks: 1 MiB, or one chunk of up to 4 MiB+)
MAX_FRAME = 64 << 20

_T = TypeVar("_T", bound=f.Command)


class PeerError(Exception):
    """The peer refused or sent what the conversation does not allow."""


class Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.corr = 0

    def send(self, cmd: f.Command) -> None:
        self.writer.write(f.encode(cmd))

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr

    async def frame(self) -> bytes:
        (size,) = _SIZE.unpack(await self.reader.readexactly(4))
        if size > MAX_FRAME:
            raise PeerError(f"a frame of {size} bytes")
        return await self.reader.readexactly(size)

    async def answer(self, kind: type[_T]) -> _T:
        """The next frame, which must be ``kind`` (Heartbeats skipped)."""
        while True:
            cmd = f.decode(await self.frame())
            if isinstance(cmd, f.Heartbeat):
                continue
            if not isinstance(cmd, kind):
                raise PeerError(f"expected {kind.__name__}, got {type(cmd).__name__}")
            return cmd

    async def request(self, cmd: f.Command, kind: type[_T]) -> _T:
        self.send(cmd)
        return await self.answer(kind)


#: The connection_name of a broker's own connections to its peers: what they ask (a Delete of
#: a member) is not passed on to the other members again.
PEER_CONNECTION = "streamlet replication"


@dataclass(frozen=True)
class PeerLogin:
    """How this broker's links reach the other brokers: the replication user, and with
    replication over TLS (config.replication_tls) the current client context, asked for on
    each connect so that a reloaded certificate serves the next link."""

    user: str
    password: str
    tls: Callable[[], ssl.SSLContext | None] | None = None

    def context(self) -> ssl.SSLContext | None:
        return self.tls() if self.tls is not None else None


@contextlib.asynccontextmanager
async def open_peer(address: Address, credentials: PeerLogin, name: str = PEER_CONNECTION,
                    vhost: str = "/") -> AsyncIterator[Peer]:
    """A logged-in connection to ``address``, closed on exit; over TLS when ``credentials``
    say so, the peer's certificate checked against the host of ``address``."""
    host, port = address
    ctx = credentials.context()
    reader, writer = await asyncio.open_connection(
        host, port, ssl=ctx, server_hostname=host if ctx is not None else None)
    peer = Peer(reader, writer)
    try:
        user, password = credentials.user, credentials.password
        hs = ClientHandshake(properties={"product": "streamlet", "connection_name": name},
                             user=user, password=password, vhost=vhost, heartbeat=None)
        for cmd in hs.start():
            peer.send(cmd)
        while hs.opened is None:
            for cmd in hs.receive_frame(await peer.frame()):
                peer.send(cmd)
        peer.corr = hs.correlation
        yield peer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
