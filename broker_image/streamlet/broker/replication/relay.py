"""Publishers declared on a follower, passed on to the leader.

As RabbitMQ does, a follower takes a client's publishers on a stream it follows and declares
them on the leader, over one upstream connection per client connection and leader: Publish
frames go up as they came, PublishConfirm and PublishError come back as sent; deduplication,
confirms and refusals stay the leader's. When the leader goes or says the stream moved, the
client is told MetadataUpdate and the publishers are dropped. A slow leader slows the client
(HIGH_WATER). Mechanism: docs/replication.md#what-a-client-sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from ...rabbitmq import Code, Key
from ...rabbitmq import frames as f
from ..directory import Address
from .forward import FORWARDED
from .peer import Peer, PeerError, PeerLogin, open_peer


class Client(Protocol):
    """What the relay needs of the client's connection (the RabbitMQ adapter's)."""

    peer: str | None

    def write(self, data: bytes) -> None: ...

    def spawn(self, work: Coroutine[Any, Any, None], what: str) -> None: ...

    def hold_reading(self, held: bool) -> None: ...

    def relay_dropped(self, ids: list[int], stream: str) -> None:
        """The leader no longer takes ``stream`` from these publishers."""

    def relay_closed(self, relay: Relay) -> None: ...

log = logging.getLogger("streamlet.broker")

_SIZE = struct.Struct(">I")
_KEY = struct.Struct(">H")
#: the client is not read while the upstream holds more than this, unsent
HIGH_WATER = 4 << 20
TIMEOUT_S = 10.0
#: frames passed back to the client as they came
_PASSED = frozenset({Key.PUBLISH_CONFIRM, Key.PUBLISH_ERROR})

_T = TypeVar("_T", bound=f.Command)


class Relay:
    """One client connection's publishers on streams led by ``leader``."""

    def __init__(self, conn: Client, leader: Address, vhost: str,
                 credentials: PeerLogin) -> None:
        self.conn = conn
        self.leader = leader
        self.vhost = vhost
        self.credentials = credentials
        self.streams: dict[int, str] = {}  # publisher id -> stream
        self._peer: Peer | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._opening = asyncio.Lock()
        self._answers: dict[int, asyncio.Future[f.Command]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._draining = False
        self.closed = False

    # --- what the client's handlers call ----------------------------------------------------------

    async def declare(self, cmd: f.DeclarePublisher) -> int:
        """The leader's answer to the client's DeclarePublisher (6 when it cannot be reached)."""
        answer = await self._request(f.DeclarePublisher(0, cmd.publisher_id, cmd.reference,
                                                        cmd.stream), f.DeclarePublisherResponse)
        code = Code.STREAM_NOT_AVAILABLE if answer is None else answer.code
        if code == Code.OK:
            self.streams[cmd.publisher_id] = cmd.stream
        return code

    def publish(self, frame: memoryview) -> None:
        """A Publish frame, as it came (key, version, body), on to the leader."""
        peer = self._peer
        if peer is None or self.closed:
            return  # lost meanwhile: the client was told (MetadataUpdate) and sends again
        peer.writer.write(_SIZE.pack(len(frame)))
        peer.writer.write(frame)
        transport = peer.writer.transport
        if not self._draining and transport.get_write_buffer_size() > HIGH_WATER:
            self._draining = True
            self.conn.hold_reading(True)
            self.conn.spawn(self._drain(peer), "relay drain")

    async def delete(self, publisher_id: int) -> int:
        self.streams.pop(publisher_id, None)
        answer = await self._request(f.DeletePublisher(0, publisher_id), f.DeletePublisherResponse)
        return Code.OK if answer is None else answer.code  # gone with the upstream: gone all the same

    async def close(self) -> None:
        self.closed = True
        self._fail_waiting()
        if self._reader is not None:
            self._reader.cancel()
        stack, self._stack, self._peer = self._stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    # --- the upstream ---------------------------------------------------------------------------

    async def _request(self, cmd: f.Command, kind: type[_T]) -> _T | None:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                peer = await self._open()
                corr = peer.next_corr()
                cmd.correlation_id = corr  # type: ignore[attr-defined]
                waiter = asyncio.get_running_loop().create_future()
                self._answers[corr] = waiter
                try:
                    peer.send(cmd)
                    answer = await waiter
                finally:
                    self._answers.pop(corr, None)
        except (OSError, TimeoutError, PeerError, ConnectionError) as e:
            log.info("connection %s: relay to the leader %s:%d: %s", self.conn.peer, *self.leader, e)
            return None
        return answer if isinstance(answer, kind) else None

    async def _open(self) -> Peer:
        async with self._opening:
            if self.closed:
                raise ConnectionError("the relay is closed")
            if self._peer is None:
                stack = contextlib.AsyncExitStack()
                self._peer = await stack.enter_async_context(open_peer(
                    self.leader, self.credentials, FORWARDED, self.vhost))
                self._stack = stack
                self._reader = asyncio.get_running_loop().create_task(self._read(self._peer))
            return self._peer

    async def _read(self, peer: Peer) -> None:
        try:
            while True:
                frame = await peer.frame()
                key = _KEY.unpack_from(frame)[0] & 0x7FFF
                if key in _PASSED:
                    self.conn.write(_SIZE.pack(len(frame)) + frame)
                    continue
                cmd = f.decode(frame)
                if isinstance(cmd, f.FrameError):
                    raise PeerError(f"a frame the relay cannot read: {cmd}")
                if isinstance(cmd, f.MetadataUpdate):
                    self._moved(cmd.stream)
                elif isinstance(cmd, f.Close):
                    peer.send(f.CloseResponse(cmd.correlation_id, Code.OK))
                    break
                elif (waiter := self._answers.get(getattr(cmd, "correlation_id", -1))) is not None \
                        and not waiter.done():
                    waiter.set_result(cmd)
        except asyncio.CancelledError:
            raise
        except (OSError, PeerError, asyncio.IncompleteReadError, ValueError) as e:
            log.info("connection %s: the leader %s:%d closed the relay: %s", self.conn.peer,
                     *self.leader, e)
        self._lost()

    async def _drain(self, peer: Peer) -> None:
        try:
            await peer.writer.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            self._draining = False
            self.conn.hold_reading(False)

    def _moved(self, stream: str) -> None:
        """The leader no longer takes ``stream``: its publishers here are dropped, the client told."""
        ids = [pid for pid, s in self.streams.items() if s == stream]
        for pid in ids:
            del self.streams[pid]
        self.conn.relay_dropped(ids, stream)

    def _lost(self) -> None:
        self.closed = True
        self._fail_waiting()
        for stream in sorted(set(self.streams.values())):
            self._moved(stream)
        self.conn.relay_closed(self)
        if self._stack is not None:
            self.conn.spawn(self.close(), "relay close")

    def _fail_waiting(self) -> None:
        for waiter in self._answers.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError("the relay closed"))
