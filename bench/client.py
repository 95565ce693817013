"""A minimal, fast protocol client for the load generator.

One :class:`Conn` is an asyncio BufferedProtocol reading into a reusable buffer, so a Deliver
frame's payload is skipped without ever being copied into a Python object when only its chunk
header is needed. Control frames use :mod:`streamlet.rabbitmq.frames`; the hot frames
(PublishConfirm, Deliver) are parsed with struct directly, per frame or per chunk, never per
message.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
from typing import Any, Protocol, cast

from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.client import ClientHandshake, HandshakeFailed, Opened
from streamlet.rabbitmq.constants import Code, Key
from streamlet.storage.chunk import HEADER_SIZE

_FRAME_HEAD = struct.Struct(">IHH")
_CONFIRM = struct.Struct(">Bi")
_MIN_FREE = 1 << 16

CREATED_OR_EXISTS = (Code.OK, Code.STREAM_ALREADY_EXISTS)


class BenchError(RuntimeError):
    pass


class PublisherSink(Protocol):
    def on_confirm(self, count: int) -> None: ...
    def on_error(self, count: int) -> None: ...
    def pump(self) -> None: ...


class ChunkSink(Protocol):
    #: True: on_chunk gets the whole chunk (header + data); False: on_header gets the header only
    wants_data: bool

    def on_header(self, buf: bytearray, pos: int) -> None: ...
    def on_chunk(self, chunk: memoryview) -> None: ...


class Conn(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self._buf = bytearray(1 << 20)
        self._view = memoryview(self._buf)
        self._r = 0
        self._w = 0
        self._skip = 0
        self._corr = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.publishers: dict[int, PublisherSink] = {}
        self.subs: dict[int, ChunkSink] = {}
        self.transport: asyncio.Transport | None = None
        self.paused = False
        loop = asyncio.get_running_loop()
        #: the handshake in progress (streamlet.rabbitmq.client): fed the control frames until Open
        self._handshake: ClientHandshake | None = None
        self.opened: asyncio.Future[Opened] = loop.create_future()
        self.closed: asyncio.Future[str] = loop.create_future()
        self.errors: list[str] = []

    # -- asyncio callbacks ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"connection lost: {exc}" if exc else "connection closed"
        if not self.closed.done():
            self.closed.set_result(reason)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(BenchError(reason))
        if not self.opened.done():
            self.opened.set_exception(BenchError(reason))

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for p in self.publishers.values():
            p.pump()

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self._buf) - self._w < _MIN_FREE:
            self._compact(_MIN_FREE)
        return self._view[self._w :]

    def _compact(self, need: int) -> None:
        """Move unread bytes to the front; grow when a whole frame will not fit."""
        unread = self._w - self._r
        if unread + need > len(self._buf):
            new = bytearray(max(2 * len(self._buf), unread + need))
            new[:unread] = self._buf[self._r : self._w]
            # no release() of the old view: the loop may still hold a slice of it
            self._buf, self._view = new, memoryview(new)
        elif self._r:
            self._buf[:unread] = self._buf[self._r : self._w]
        self._r, self._w = 0, unread

    def buffer_updated(self, nbytes: int) -> None:
        self._w += nbytes
        buf, view = self._buf, self._view
        r, w = self._r, self._w
        confirmed = False
        while True:
            if self._skip:
                k = min(self._skip, w - r)
                r += k
                self._skip -= k
                if self._skip:
                    break
            avail = w - r
            if avail < 9:
                break
            size, key, version = _FRAME_HEAD.unpack_from(buf, r)
            if key == Key.DELIVER:
                sink = self.subs.get(buf[r + 8])
                hpos = r + 9 + (8 if version >= 2 else 0)
                if sink is not None and not sink.wants_data:
                    if avail < hpos - r + HEADER_SIZE:
                        break
                    sink.on_header(buf, hpos)
                    k = min(4 + size, avail)
                    r += k
                    self._skip = 4 + size - k
                    continue
                if avail < 4 + size:
                    self._r = r
                    self._compact(4 + size)
                    buf, view, r, w = self._buf, self._view, self._r, self._w
                    break
                if sink is not None:
                    sink.on_chunk(view[hpos : r + 4 + size])
                r += 4 + size
                continue
            if avail < 4 + size:
                self._r = r
                self._compact(4 + size)
                buf, view, r, w = self._buf, self._view, self._r, self._w
                break
            if key == Key.PUBLISH_CONFIRM:
                pid, count = _CONFIRM.unpack_from(buf, r + 8)
                pub = self.publishers.get(pid)
                if pub is not None:
                    pub.on_confirm(count)
                confirmed = True
            else:
                self._control(bytes(view[r + 4 : r + 4 + size]))
            r += 4 + size
        if r == w:
            r = w = 0
        self._r, self._w = r, w
        if confirmed:
            for p in self.publishers.values():
                p.pump()

    def _control(self, frame: bytes) -> None:
        cmd = f.decode(frame)
        if self._handshake is not None:
            self._on_handshake(self._handshake, cmd)
            return
        if isinstance(cmd, f.FrameError):
            self.errors.append(f"undecodable frame from server: {cmd.reason}")
            return
        corr = getattr(cmd, "correlation_id", None)
        if cmd.RESPONSE and corr is not None and corr in self._pending:
            fut = self._pending.pop(corr)
            if not fut.done():
                fut.set_result(cmd)
        elif isinstance(cmd, f.Heartbeat):
            self.send(f.encode(f.Heartbeat()))
        elif isinstance(cmd, f.PublishError):
            self.errors.append(f"publish errors: {cmd.errors[:3]}...")
            pub = self.publishers.get(cmd.publisher_id)
            if pub is not None:
                pub.on_error(len(cmd.errors))
                pub.pump()
        elif isinstance(cmd, f.Close):
            self.errors.append(f"server closed the connection: {cmd.code} {cmd.reason}")
            self.send(f.encode(f.CloseResponse(cmd.correlation_id, Code.OK)))
        elif isinstance(cmd, f.CreditResponse):
            self.errors.append(f"credit refused: code {cmd.code} sub {cmd.subscription_id}")
        elif isinstance(cmd, f.MetadataUpdate):
            self.errors.append(f"metadata update: {cmd.stream} code {cmd.code}")

    def _on_handshake(self, hs: ClientHandshake, cmd: f.Command | f.FrameError) -> None:
        try:
            send = hs.receive(cmd)
        except HandshakeFailed as e:
            self._handshake = None
            if e.answer is not None:
                self.send(f.encode(e.answer))
            if not self.opened.done():
                self.opened.set_exception(BenchError(str(e)))
            return
        for out in send:
            self.send(f.encode(out))
        if hs.opened is not None:
            self._handshake = None
            if not self.opened.done():
                self.opened.set_result(hs.opened)

    async def open(self, hs: ClientHandshake, timeout: float = 30) -> Opened:
        """Run the handshake ``hs`` (its frames arrive through ``_control``) to Open."""
        self._handshake = hs
        for cmd in hs.start():
            self.send(f.encode(cmd))
        try:
            return await asyncio.wait_for(self.opened, timeout)
        finally:
            self._handshake = None
            self._corr = itertools.count(hs.correlation + 1)

    # -- requests ---------------------------------------------------------------------------
    def send(self, data: bytes | bytearray | memoryview) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def request(self, cmd: f.Command, timeout: float = 30) -> Any:
        corr = next(self._corr)
        cmd.correlation_id = corr  # type: ignore[attr-defined]
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        self.send(f.encode(cmd))
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(corr, None)

    async def ok(self, cmd: f.Command, accept: tuple[int, ...] = (Code.OK,)) -> Any:
        resp = await self.request(cmd)
        code = getattr(resp, "code", Code.OK)
        if code not in accept:
            raise BenchError(f"{type(cmd).__name__} answered code {code}")
        return resp

    async def create(self, stream: str) -> None:
        await self.ok(f.Create(0, stream, {}), CREATED_OR_EXISTS)

    async def delete(self, stream: str) -> None:
        await self.ok(f.Delete(0, stream), (Code.OK, Code.STREAM_DOES_NOT_EXIST))

    async def declare_publisher(self, pid: int, stream: str) -> None:
        # an empty reference means none; RabbitMQ 3.10 closes the connection on a null string
        await self.ok(f.DeclarePublisher(0, pid, "", stream))

    async def subscribe(self, sub_id: int, stream: str, offset_type: int, credit: int,
                        sink: ChunkSink) -> None:
        self.subs[sub_id] = sink
        await self.ok(f.Subscribe(0, sub_id, stream, offset_type, 0, credit, {}))

    def credit(self, sub_id: int, credit: int) -> None:
        self.send(f.encode(f.Credit(sub_id, credit)))

    async def close(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        with contextlib.suppress(BenchError, TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(self.request(f.Close(0, Code.OK, "bench done")), 5)
        self.transport.close()


async def connect(port: int, host: str = "127.0.0.1", user: str = "guest",
                  password: str = "guest") -> Conn:
    """Open a connection through the whole handshake: peer properties, SASL PLAIN, Tune, Open."""
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(Conn, host, port)
    # no heartbeats (None: 0 answered to the broker's Tune): runs are short and a busy loop
    # must not be closed for a late one
    await conn.open(ClientHandshake(
        properties={"product": "streamlet-bench", "version": "0.1.0"}, user=user,
        password=password, heartbeat=None))
    return conn
