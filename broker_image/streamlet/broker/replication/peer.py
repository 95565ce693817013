"""A broker's own connection to another broker (a follower to its leader, a broker creating a
stream's members on its peers): asyncio streams, the client's handshake machine, frames in and
out. No heartbeats: each side's liveness is the placement driver's business.

A link goes to a configured peer only (``PeerLogin.peers``): any other address is refused,
logged, before anything is sent, so the replication user's password never leaves the peers.
``open_buffered_peer`` reads a follower's link into one buffer and hands frames out as views
of it. Mechanism: docs/replication.md#the-data-path-brokerreplication.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from ...rabbitmq import frames as f
from ...rabbitmq.client import ClientHandshake
from ...replication.requests import peer_index
from ..directory import Address

log = logging.getLogger("streamlet.broker")

_SIZE = struct.Struct(">I")
#: the largest frame a peer sends (a leader's run of chunks: 1 MiB, or one chunk of up to 4 MiB+)
MAX_FRAME = 64 << 20

_T = TypeVar("_T", bound=f.Command)


class PeerError(Exception):
    """The peer refused or sent what the conversation does not allow."""


class NotAPeer(PeerError):
    """A link asked for to an address that is not one of cluster.peers: never made."""


class _Conversation:
    """Requests and their answers over a peer link; how a frame is sent and read is the
    subclass's."""

    corr = 0

    def send(self, cmd: f.Command) -> None:
        raise NotImplementedError

    async def _next_frame(self) -> bytes | memoryview:
        raise NotImplementedError

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr

    async def answer(self, kind: type[_T]) -> _T:
        """The next frame, which must be ``kind`` (Heartbeats skipped)."""
        while True:
            cmd = f.decode(await self._next_frame())
            if isinstance(cmd, f.Heartbeat):
                continue
            if not isinstance(cmd, kind):
                raise PeerError(f"expected {kind.__name__}, got {type(cmd).__name__}")
            return cmd

    async def request(self, cmd: f.Command, kind: type[_T]) -> _T:
        self.send(cmd)
        return await self.answer(kind)


class Peer(_Conversation):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def send(self, cmd: f.Command) -> None:
        self.writer.write(f.encode(cmd))

    async def frame(self) -> bytes:
        (size,) = _SIZE.unpack(await self.reader.readexactly(4))
        if size > MAX_FRAME:
            raise PeerError(f"a frame of {size} bytes")
        return await self.reader.readexactly(size)

    async def _next_frame(self) -> bytes:
        return await self.frame()


#: A buffered peer's buffer to begin with; it grows (in MiB steps) to the largest frame seen.
BUFFER_BYTES = 1 << 20
_STEP = 1 << 20


class _FrameBuffer(asyncio.BufferedProtocol):
    """Frames received into one bytearray. Layout: ``[start, parsed)`` whole frames not yet
    taken, ``[parsed, end)`` the frame being received (its end ``want`` once its size is
    known). A frame taken (``take``) is a view of the buffer, left untouched until the next
    ``take``.

    A read never goes past the frame being received (its size first, then the rest), and
    once a frame is whole the socket is not read until it is taken: the frame taken is the
    only one in the buffer, so the next begins at 0 and nothing is ever moved (the old
    buffer is kept for a frame still out if one must be made room for anyway)."""

    def __init__(self) -> None:
        self.buf = bytearray(BUFFER_BYTES)
        self.view = memoryview(self.buf)
        self.start = self.parsed = self.end = 0
        self.want = 0  # end of the frame being received; 0: its size is not read yet
        self.lent = False  # a frame was taken and may still be in use
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None:
            self.error = exc or asyncio.IncompleteReadError(b"", None)
        self._wake()
        if not self.closed.done():
            self.closed.set_result(None)

    def eof_received(self) -> bool | None:
        if self.error is None:
            self.error = asyncio.IncompleteReadError(b"", None)
        self._wake()
        return None  # the transport closes itself

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.start == self.end and not self.lent:
            self.start = self.parsed = self.end = 0  # all taken: start over, nothing to move
        stop = self.want if self.want else self.parsed + 4
        if stop > len(self.buf):
            self._make_room(stop - self.end)
            stop = self.want if self.want else self.parsed + 4
        return self.view[self.end : stop]

    def _make_room(self, need: int) -> None:
        """Room for ``need`` more bytes after ``end``: what is not taken moves to the front,
        in place while no frame is out, else into a new buffer (the frame out keeps the old),
        grown if it must be."""
        keep = self.end - self.start
        size = keep + need
        if self.lent or size > len(self.buf):
            buf = bytearray(max(len(self.buf), (size + _STEP - 1) // _STEP * _STEP))
            buf[:keep] = self.view[self.start : self.end]
            self.buf, self.view = buf, memoryview(buf)
        else:
            self.view[:keep] = self.view[self.start : self.end]
        shift = self.start
        self.start, self.parsed, self.end = 0, self.parsed - shift, self.end - shift
        if self.want:
            self.want -= shift

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        whole = self.parsed
        while True:
            if not self.want:
                if self.end - self.parsed < 4:
                    break
                (size,) = _SIZE.unpack_from(self.buf, self.parsed)
                if size > MAX_FRAME:
                    self.error = PeerError(f"a frame of {size} bytes")
                    if self.transport is not None:
                        self.transport.abort()
                    break
                self.want = self.parsed + 4 + size
            if self.end < self.want:
                break
            self.parsed, self.want = self.want, 0
        if self.parsed != whole:
            self._wake()
            if not self.paused and self.transport is not None:
                self.paused = True  # until it is taken (``take``)
                self.transport.pause_reading()

    def take(self) -> memoryview | None:
        """The next whole frame (after its size), or None."""
        self.lent = False
        if self.start == self.parsed:
            return None
        (size,) = _SIZE.unpack_from(self.buf, self.start)
        frame = self.view[self.start + 4 : self.start + 4 + size]
        self.start += 4 + size
        self.lent = True
        if self.paused and self.start == self.parsed and self.transport is not None:
            self.paused = False  # read on once this one is done with (the next ``take``)
            self.transport.resume_reading()
        return frame


class BufferedPeer(_Conversation):
    """A peer read with ``_FrameBuffer``; see the module's doc. Only what a follower's link
    uses: send, frames, requests."""

    def __init__(self, proto: _FrameBuffer) -> None:
        self.proto = proto

    def send(self, cmd: f.Command) -> None:
        t = self.proto.transport
        if t is not None and not t.is_closing():
            t.write(f.encode(cmd))

    async def frame_view(self) -> memoryview:
        """The next frame (after its size prefix) as a view of the buffer: valid until the
        next ``frame_view`` or ``frame``, no copy."""
        p = self.proto
        while True:
            frame = p.take()
            if frame is not None:
                return frame
            if p.error is not None:
                raise p.error
            p.waiter = asyncio.get_running_loop().create_future()
            try:
                await p.waiter
            finally:
                p.waiter = None

    async def frame(self) -> bytes:
        frame = bytes(await self.frame_view())
        self.proto.lent = False  # copied: the buffer may move
        return frame

    async def _next_frame(self) -> memoryview:
        return await self.frame_view()  # decoded before the next is read: no copy


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
    #: cluster.peers: the only addresses a link goes to
    peers: tuple[Address, ...] = ()

    def context(self) -> ssl.SSLContext | None:
        return self.tls() if self.tls is not None else None

    def check(self, address: Address) -> None:
        """Raise NotAPeer (logged) unless ``address`` is one of the configured peers."""
        if peer_index(self.peers, address) is None:
            log.error("refused to log in to %s:%d as the replication user: not one of "
                      "cluster.peers", *address)
            raise NotAPeer(f"{address[0]}:{address[1]} is not one of cluster.peers")


@contextlib.asynccontextmanager
async def open_peer(address: Address, credentials: PeerLogin, name: str = PEER_CONNECTION,
                    vhost: str = "/") -> AsyncIterator[Peer]:
    """A logged-in connection to ``address``, closed on exit; over TLS when ``credentials``
    say so, the peer's certificate checked against the host of ``address``. Raises NotAPeer
    for an address that is not a configured peer."""
    credentials.check(address)
    host, port = address
    ctx = credentials.context()
    reader, writer = await asyncio.open_connection(
        host, port, ssl=ctx, server_hostname=host if ctx is not None else None)
    peer = Peer(reader, writer)
    try:
        await _login(peer, credentials, name, vhost)
        yield peer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


@contextlib.asynccontextmanager
async def open_buffered_peer(address: Address, credentials: PeerLogin,
                             name: str = PEER_CONNECTION,
                             vhost: str = "/") -> AsyncIterator[BufferedPeer]:
    """As ``open_peer``, read into one buffer (``BufferedPeer``): a follower's link."""
    credentials.check(address)
    host, port = address
    ctx = credentials.context()
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(
        _FrameBuffer, host, port, ssl=ctx, server_hostname=host if ctx is not None else None)
    peer = BufferedPeer(proto)
    try:
        await _login(peer, credentials, name, vhost)
        yield peer
    finally:
        if proto.transport is not None:
            proto.transport.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(proto.closed), 5)


async def _login(peer: Peer | BufferedPeer, credentials: PeerLogin, name: str,
                 vhost: str) -> None:
    """The client's handshake as the replication user."""
    hs = ClientHandshake(properties={"product": "streamlet", "connection_name": name},
                         user=credentials.user, password=credentials.password, vhost=vhost,
                         heartbeat=None)
    for cmd in hs.start():
        peer.send(cmd)
    while hs.opened is None:
        for cmd in hs.receive_frame(await peer.frame()):
            peer.send(cmd)
    peer.corr = hs.correlation
