"""One connection to a broker: the asyncio protocol, the handshake, requests matched to their
responses by correlation id, heartbeats, and the dispatch of server-initiated frames.

Reads land in a ``ReadBuffer`` (streamlet.wire.framing, as the broker's): frames, and the chunk
data a Deliver hands a subscriber, are views of it, never copied.

Every frame goes through :func:`streamlet.rabbitmq.frames.decode` except PublishConfirm and
Deliver, which arrive at message rates: one ``struct`` call each, not one per id or record. A
subscriber of chunk headers only (a counter) joins ``header_subscribers``: it is handed the
frame and where the header starts, no ChunkHeader built, no data sliced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import struct
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from .. import __version__
from ..rabbitmq import Code, FrameSplitter, Key, frames
from ..rabbitmq.client import ClientHandshake, HandshakeFailed, Opened
from ..rabbitmq.constants import RESPONSE_FLAG
from ..rabbitmq.frames import Command, FrameError, decode, encode
from ..storage.chunk import HEADER_SIZE, ChunkError, ChunkHeader
from ..wire.framing import ReadBuffer
from .errors import ConnectionClosed, StreamletError

log = logging.getLogger(__name__)

_KEY_VERSION = struct.Struct(">HH")
_CONFIRM_HEAD = struct.Struct(">Bi")  # publisher id, count; after key and version
_DELIVER_V2_COMMITTED = struct.Struct(">Q")
_DELIVER = int(Key.DELIVER)  # plain ints: an IntEnum member's lookup costs per frame
_PUBLISH_CONFIRM = int(Key.PUBLISH_CONFIRM)
_HEARTBEAT = encode(frames.Heartbeat())

#: What this client speaks, declared in ExchangeCommandVersions (RabbitMQ's order).
CLIENT_COMMANDS: list[tuple[int, int, int]] = [
    (Key.DECLARE_PUBLISHER, 1, 1), (Key.PUBLISH, 1, 1), (Key.QUERY_PUBLISHER_SEQUENCE, 1, 1),
    (Key.DELETE_PUBLISHER, 1, 1), (Key.SUBSCRIBE, 1, 1), (Key.DELIVER, 1, 1), (Key.CREDIT, 1, 1),
    (Key.STORE_OFFSET, 1, 1), (Key.QUERY_OFFSET, 1, 1), (Key.UNSUBSCRIBE, 1, 1),
    (Key.CREATE, 1, 1), (Key.DELETE, 1, 1), (Key.METADATA, 1, 1), (Key.CLOSE, 1, 1),
    (Key.HEARTBEAT, 1, 1), (Key.ROUTE, 1, 1), (Key.PARTITIONS, 1, 1),
    (Key.CONSUMER_UPDATE, 1, 1), (Key.STREAM_STATS, 1, 1), (Key.CREATE_SUPER_STREAM, 1, 1),
    (Key.DELETE_SUPER_STREAM, 1, 1),
]

#: Servers that answer ExchangeCommandVersions (older RabbitMQ closes the connection on it).
_VERSION_EXCHANGE_SINCE = (3, 13)

C = TypeVar("C", bound=Command)


class PublisherHandler(Protocol):
    stream: str

    def _on_confirm(self, ids: tuple[int, ...]) -> None: ...
    def _on_publish_error(self, errors: list[tuple[int, int]]) -> None: ...
    def _on_closed(self, exc: StreamletError) -> None: ...


class SubscriberHandler(Protocol):
    stream: str

    def _on_chunk(self, header: ChunkHeader, data: memoryview) -> None: ...
    def _on_consumer_update(self, correlation_id: int, active: bool) -> None: ...
    def _on_closed(self, exc: StreamletError) -> None: ...


class HeaderSubscriberHandler(Protocol):
    """A subscriber that reads chunk headers only: ``frame`` is the Deliver frame (a view of
    the read buffer, valid during the call) and its chunk header starts at ``pos``."""

    stream: str

    def _on_chunk_header(self, frame: memoryview, pos: int) -> None: ...
    def _on_consumer_update(self, correlation_id: int, active: bool) -> None: ...
    def _on_closed(self, exc: StreamletError) -> None: ...


def parse_version(text: str) -> tuple[int, ...]:
    """``"3.13.7"`` -> (3, 13, 7); ``"4.0.0-beta"`` -> (4, 0, 0); no leading number -> ()."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


class Connection(asyncio.BufferedProtocol):
    """The wire side of a :class:`~streamlet.client.Client`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float | None = 30.0) -> None:
        self.loop = loop
        self.timeout = timeout
        self.transport: asyncio.Transport | None = None
        self._reader = ReadBuffer(FrameSplitter())  # reads land there, frames are views of it
        self._corr = 0
        self._pending: dict[int, asyncio.Future[Command]] = {}
        #: the handshake in progress (streamlet.rabbitmq.client): fed every frame until Open
        self._handshake: ClientHandshake | None = None
        self._opened: asyncio.Future[Opened] = loop.create_future()
        self._lost: asyncio.Future[None] = loop.create_future()
        self._writable: asyncio.Future[None] | None = None
        #: set once the connection cannot be used any more; raised to every later caller
        self.closed: ConnectionClosed | None = None
        self.publishers: dict[int, PublisherHandler] = {}
        self.subscribers: dict[int, SubscriberHandler] = {}
        #: subscription id -> a handler of chunk headers only (ids shared with ``subscribers``)
        self.header_subscribers: dict[int, HeaderSubscriberHandler] = {}
        self.on_metadata_update: Callable[[str, int], None] | None = None
        self.server_properties: dict[str, str] = {}
        self.connection_properties: dict[str, str] = {}
        #: key -> (min, max) the server declared; None if it was not asked (older servers)
        self.server_commands: dict[int, tuple[int, int]] | None = None
        self.frame_max = 0
        self.heartbeat = 0
        self._heartbeat_timer: asyncio.TimerHandle | None = None
        self._wrote = False  # since the last heartbeat tick
        self._read = False
        self._silent_ticks = 0

    # --- asyncio.BufferedProtocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but behave as one
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"connection lost: {exc}" if exc else "connection closed"
        self._shutdown(ConnectionClosed(Code.STREAM_NOT_AVAILABLE, reason))
        if not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None:
            if not self._writable.done():
                self._writable.set_result(None)
            self._writable = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.space()

    def data_received(self, data: bytes | memoryview) -> None:
        """Bytes read elsewhere (tests feed them so): as if read into the buffer, in pieces of
        the room it offers."""
        view = memoryview(data)
        while view:
            room = self._reader.space()
            n = min(len(room), len(view))
            room[:n] = view[:n]
            view = view[n:]
            self.buffer_updated(n)

    def buffer_updated(self, nbytes: int) -> None:
        self._read = True
        key_version = _KEY_VERSION.unpack_from
        try:
            for frame in self._reader.filled(nbytes):
                key, version = key_version(frame, 0)
                if key == _DELIVER:
                    pos = 13 if version >= 2 else 5  # after the committed offset in v2
                    sub = self.subscribers.get(frame[4])
                    if sub is not None:
                        self._on_deliver(sub, frame, pos)
                    else:
                        counter = self.header_subscribers.get(frame[4])
                        if counter is not None:  # else unsubscribed while it was on its way
                            counter._on_chunk_header(frame, pos)
                elif key == _PUBLISH_CONFIRM:
                    pid, n = _CONFIRM_HEAD.unpack_from(frame, 4)
                    publisher = self.publishers.get(pid)
                    if publisher is not None:
                        publisher._on_confirm(struct.unpack_from(f">{n}Q", frame, 9))
                else:
                    self._on_frame(frame)
        except Exception as e:  # a malformed stream or a bug: this connection cannot go on
            log.exception("closing connection after a bad frame")
            self._abort(ConnectionClosed(Code.INTERNAL_ERROR, f"bad frame from server: {e}"))

    # --- writing ---------------------------------------------------------------------------

    def write(self, data: bytes | bytearray) -> None:
        if self.closed is not None:
            raise self.closed
        assert self.transport is not None
        self._wrote = True
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the transport's buffer is over its high-water mark."""
        while self._writable is not None:
            await asyncio.shield(self._writable)
        if self.closed is not None:
            raise self.closed

    @property
    def paused(self) -> bool:
        return self._writable is not None

    def next_correlation(self) -> int:
        self._corr = (self._corr + 1) & 0xFFFFFFFF
        return self._corr

    async def request(self, cmd: C, ok: tuple[int, ...] = (Code.OK,)) -> Any:
        """Send ``cmd`` (which carries a fresh correlation id) and return its response.

        A response code outside ``ok`` raises :class:`StreamletError`."""
        corr: int = cmd.correlation_id  # type: ignore[attr-defined]
        fut: asyncio.Future[Command] = self.loop.create_future()
        self._pending[corr] = fut
        try:
            self.write(encode(cmd))
            async with asyncio.timeout(self.timeout):
                resp = await fut
        except TimeoutError:
            raise StreamletError(
                Code.INTERNAL_ERROR, f"no answer to {type(cmd).__name__} in {self.timeout} s"
            ) from None
        finally:
            self._pending.pop(corr, None)
        code = getattr(resp, "code", Code.OK)
        if code not in ok:
            target = getattr(cmd, "stream", None) or getattr(cmd, "name", None)
            about = f" for {target!r}" if target else ""
            raise StreamletError(code, f"{type(cmd).__name__}{about} failed")
        return resp

    # --- handshake -------------------------------------------------------------------------

    async def open(
        self, *, user: str, password: str, vhost: str, heartbeat: int, frame_max: int,
        connection_name: str | None, properties: dict[str, str] | None = None,
        mechanism: str = "PLAIN",
    ) -> None:
        props = {
            "product": "streamlet-client",
            "version": __version__,
            "platform": f"Python {sys.version.split()[0]}",
            "information": "https://github.com/streamlet",
        }
        if connection_name:
            props["connection_name"] = connection_name
        props.update(properties or {})
        hs = ClientHandshake(properties=props, user=user, password=password, vhost=vhost,
                             mechanism=mechanism,
                             frame_max=frame_max, heartbeat=heartbeat, correlation=self._corr)
        self._handshake = hs
        try:
            for cmd in hs.start():
                self.write(encode(cmd))
            async with asyncio.timeout(self.timeout):
                opened = await self._opened
        except TimeoutError:
            waiting = hs.waiting_for
            what = (f"answer to {waiting.removesuffix('Response')}"
                    if waiting.endswith("Response") else f"{waiting} from the server")
            raise StreamletError(Code.INTERNAL_ERROR, f"no {what} in {self.timeout} s") from None
        finally:
            self._handshake = None
            self._corr = hs.correlation
        self.frame_max, self.heartbeat = opened.frame_max, opened.heartbeat
        self.server_properties = opened.server_properties
        self.connection_properties = opened.connection_properties
        if self.heartbeat:
            self._heartbeat_timer = self.loop.call_later(self.heartbeat / 2, self._heartbeat_tick)
        version = parse_version(self.server_properties.get("version", ""))
        if version >= _VERSION_EXCHANGE_SINCE:
            resp = await self.request(frames.ExchangeCommandVersions(
                self.next_correlation(),
                [frames.CommandVersion(k, lo, hi) for k, lo, hi in CLIENT_COMMANDS]))
            self.server_commands = {v.key: (v.min_version, v.max_version) for v in resp.versions}

    def supports(self, key: int) -> bool:
        """Whether the server speaks command ``key`` (keys after 25 need a 3.13-era server)."""
        if self.server_commands is not None:
            return key in self.server_commands
        return key <= Key.PARTITIONS

    # --- closing ---------------------------------------------------------------------------

    async def close(self, timeout: float = 5.0) -> None:
        if self.closed is None:
            with contextlib.suppress(StreamletError, TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.request(frames.Close(self.next_correlation(), Code.OK, "client close"))
            self._shutdown(ConnectionClosed(Code.OK, "closed by the client"))
        if self.transport is not None:
            self.transport.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await asyncio.shield(self._lost)

    def _abort(self, exc: ConnectionClosed) -> None:
        self._shutdown(exc)
        if self.transport is not None:
            self.transport.abort()

    def _shutdown(self, exc: ConnectionClosed) -> None:
        """Mark the connection dead and fail everyone waiting on it (first reason wins)."""
        if self.closed is not None:
            return
        self.closed = exc
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
        if not self._opened.done():
            self._opened.set_exception(exc)
            self._opened.exception()  # mark retrieved: nobody may be waiting for Open
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self._pending.clear()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        handlers: list[PublisherHandler | SubscriberHandler | HeaderSubscriberHandler] = [
            *self.publishers.values(), *self.subscribers.values(),
            *self.header_subscribers.values()]
        self.publishers.clear()
        self.subscribers.clear()
        self.header_subscribers.clear()
        for h in handlers:
            h._on_closed(exc)

    # --- heartbeats ------------------------------------------------------------------------

    def _heartbeat_tick(self) -> None:
        """Every half interval: send a Heartbeat if nothing was written since the last tick,
        and give up on a server silent for two whole intervals (four ticks).

        Half, as RabbitMQ's own heartbeat sender does: with a tick per interval, a frame
        written just after a tick left the connection silent for nearly two intervals, and a
        server closes a peer silent for just over two (RabbitMQ between two and three)."""
        if self.closed is not None:
            return
        if not self._wrote:
            self.write(_HEARTBEAT)
        self._wrote = False
        self._silent_ticks = 0 if self._read else self._silent_ticks + 1
        self._read = False
        if self._silent_ticks >= 4:
            self._abort(ConnectionClosed(
                Code.STREAM_NOT_AVAILABLE, f"no data from the server for {2 * self.heartbeat} s"))
            return
        self._heartbeat_timer = self.loop.call_later(self.heartbeat / 2, self._heartbeat_tick)

    # --- reading ---------------------------------------------------------------------------

    def _on_deliver(self, sub: SubscriberHandler, frame: memoryview, pos: int) -> None:
        try:
            header = ChunkHeader.unpack(frame, pos)
        except ChunkError as e:
            raise ValueError(f"bad Deliver: {e}") from e
        start = pos + HEADER_SIZE
        if len(frame) - start < header.data_length:
            raise ValueError("Deliver shorter than its chunk's data length")
        sub._on_chunk(header, frame[start : start + header.data_length])

    def _on_frame(self, frame: memoryview) -> None:
        cmd = decode(frame)
        if self._handshake is not None:
            self._on_handshake_frame(self._handshake, cmd)
            return
        if isinstance(cmd, FrameError):
            fut = self._pending.get(cmd.correlation_id) if cmd.correlation_id is not None else None
            if fut is not None and (cmd.key & RESPONSE_FLAG) and not fut.done():
                fut.set_exception(StreamletError(cmd.code, cmd.reason))
                return
            # a newer server may send what this client does not know: skip it, as RabbitMQ's
            # own clients do, rather than drop the connection
            log.warning("ignoring a frame from the server: %s", cmd.reason)
            return
        if isinstance(cmd, frames.PublishError):
            publisher = self.publishers.get(cmd.publisher_id)
            if publisher is not None:
                publisher._on_publish_error(cmd.errors)
        elif isinstance(cmd, frames.MetadataUpdate):
            if self.on_metadata_update is not None:
                self.on_metadata_update(cmd.stream, cmd.code)
        elif isinstance(cmd, frames.Heartbeat):
            pass  # not answered: our own timer sends ours (as RabbitMQ and rstream do)
        elif isinstance(cmd, frames.Close):
            with contextlib.suppress(StreamletError):
                self.write(encode(frames.CloseResponse(cmd.correlation_id, Code.OK)))
            self._shutdown(ConnectionClosed(cmd.code, f"closed by the server: {cmd.reason}"))
            assert self.transport is not None
            self.transport.close()
        elif isinstance(cmd, frames.ConsumerUpdate):
            sub = (self.subscribers.get(cmd.subscription_id)
                   or self.header_subscribers.get(cmd.subscription_id))
            if sub is not None:
                sub._on_consumer_update(cmd.correlation_id, bool(cmd.active))
            else:
                self.write(encode(frames.ConsumerUpdateResponse(
                    cmd.correlation_id, Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, 0, 0)))
        elif isinstance(cmd, frames.CreditResponse):
            log.warning("Credit for subscription %d refused: code %d", cmd.subscription_id, cmd.code)
        elif cmd.RESPONSE:
            corr = getattr(cmd, "correlation_id", None)
            fut = self._pending.get(corr) if corr is not None else None
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            else:
                log.debug("response nobody waits for: %r", cmd)
        else:
            log.warning("ignoring unexpected %s from the server", type(cmd).__name__)

    def _on_handshake_frame(self, hs: ClientHandshake, cmd: Command | FrameError) -> None:
        """A frame before Open: the machine decides; a server's Close ends it as after Open."""
        try:
            send = hs.receive(cmd)
        except HandshakeFailed as e:
            self._handshake = None
            if e.answer is not None:
                with contextlib.suppress(StreamletError):
                    self.write(encode(e.answer))
                self._shutdown(ConnectionClosed(e.code, str(e)))
                assert self.transport is not None
                self.transport.close()
            elif not self._opened.done():
                self._opened.set_exception(StreamletError(e.code, str(e)))
            return
        for out in send:
            self.write(encode(out))
        if hs.opened is not None:
            self._handshake = None
            if not self._opened.done():
                self._opened.set_result(hs.opened)
