"""The client: stream administration, and the factory of producers and consumers."""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl as ssl_
from collections.abc import Callable
from typing import Any

from ..rabbitmq import Code, Key, frames
from .connection import Connection
from .consumer import Consumer
from .errors import StreamletError
from .offsets import OffsetSpec
from .producer import Producer

log = logging.getLogger(__name__)

MetadataCallback = Callable[[str, int], Any]


async def connect(
    host: str = "127.0.0.1", port: int = 5552, user: str = "guest", password: str = "guest",
    vhost: str = "/", heartbeat: int = 60, frame_max: int = 1048576,
    ssl: ssl_.SSLContext | None = None, connection_name: str | None = None,
    timeout: float | None = 30.0, properties: dict[str, str] | None = None,
    mechanism: str = "PLAIN",
) -> Client:
    """Open a connection and run the handshake. ``timeout`` bounds every request (None: none);
    ``properties``: more client properties for PeerProperties."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        _, conn = await loop.create_connection(
            lambda: Connection(loop, timeout), host, port, ssl=ssl,
            server_hostname=host if ssl is not None else None)
    try:
        await conn.open(user=user, password=password, vhost=vhost, heartbeat=heartbeat,
                        frame_max=frame_max, connection_name=connection_name,
                        properties=properties, mechanism=mechanism)
    except BaseException:
        if conn.transport is not None:
            conn.transport.abort()
        raise
    return Client(conn)


def _free_id(used: dict[int, Any], what: str, *more: dict[int, Any]) -> int:
    for i in range(256):
        if i not in used and not any(i in m for m in more):
            return i
    raise StreamletError(Code.PRECONDITION_FAILED, f"all 256 {what} ids of this connection are in use")


class Client:
    """One connection. Use :func:`connect` to make one; ``async with client:`` closes it."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        #: called as ``callback(stream, code)`` on MetadataUpdate: a callable or a list of them
        self.on_metadata_update: MetadataCallback | list[MetadataCallback] = []
        self._callback_tasks: set[asyncio.Task[Any]] = set()
        conn.on_metadata_update = self._metadata_update

    # --- connection ------------------------------------------------------------------------

    @property
    def server_properties(self) -> dict[str, str]:
        return self._conn.server_properties

    @property
    def connection_properties(self) -> dict[str, str]:
        """What the server answered to Open (``advertised_host``, ``advertised_port``...)."""
        return self._conn.connection_properties

    @property
    def frame_max(self) -> int:
        return self._conn.frame_max

    @property
    def heartbeat(self) -> int:
        return self._conn.heartbeat

    @property
    def closed(self) -> bool:
        return self._conn.closed is not None

    def supports(self, key: int) -> bool:
        return self._conn.supports(key)

    async def close(self) -> None:
        await self._conn.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _request(self, make: Callable[[int], frames.Command], ok: tuple[int, ...] = (Code.OK,)) -> Any:
        return await self._conn.request(make(self._conn.next_correlation()), ok)

    async def request(self, make: Callable[[int], frames.Command],
                      ok: tuple[int, ...] = (Code.OK,)) -> Any:
        """Any request (``make`` builds it from a correlation id): its response, or
        StreamletError when its code is not in ``ok``. For commands without a method here, as
        the placement driver's Fence and Assign."""
        return await self._request(make, ok)

    def _require(self, key: Key) -> None:
        # an older server closes the whole connection on a key it does not know: refuse here
        if not self._conn.supports(key):
            raise StreamletError(Code.UNKNOWN_FRAME, f"the server does not support {key.name}")

    # --- streams ---------------------------------------------------------------------------

    async def create_stream(
        self, name: str, arguments: dict[str, str] | None = None, exists_ok: bool = False
    ) -> None:
        ok = (Code.OK, Code.STREAM_ALREADY_EXISTS) if exists_ok else (Code.OK,)
        await self._request(lambda c: frames.Create(c, name, dict(arguments or {})), ok)

    async def delete_stream(self, name: str, missing_ok: bool = False) -> None:
        ok = (Code.OK, Code.STREAM_DOES_NOT_EXIST) if missing_ok else (Code.OK,)
        await self._request(lambda c: frames.Delete(c, name), ok)

    async def metadata(self, names: list[str]) -> frames.MetadataResponse:
        resp: frames.MetadataResponse = await self._request(lambda c: frames.Metadata(c, list(names)))
        return resp

    async def leader(self, stream: str) -> tuple[str, int] | None:
        """Where ``stream`` lives, from Metadata: its leader's advertised host and port, or
        None when no broker knows it. With a stream directory, any broker answers this."""
        meta = await self.metadata([stream])
        entry = meta.streams[0] if meta.streams else None
        if entry is None or entry.code != Code.OK:
            return None
        for b in meta.brokers:
            if b.reference == entry.leader:
                return b.host, b.port
        return None

    def is_local(self, address: tuple[str, int]) -> bool:
        """True if ``address`` is this connection's own broker (as it advertised itself)."""
        props = self.connection_properties
        return (props.get("advertised_host"), props.get("advertised_port")) == (address[0], str(address[1]))

    async def stream_exists(self, name: str) -> bool:
        """True unless the server says the stream does not exist (a stream whose leader is
        down exists)."""
        resp = await self.metadata([name])
        codes = [s.code for s in resp.streams if s.stream == name]
        return bool(codes) and codes[0] != Code.STREAM_DOES_NOT_EXIST

    async def stream_stats(self, name: str) -> dict[str, int]:
        """``first_chunk_id``, ``committed_chunk_id``, ``last_chunk_id`` (-1 when empty)..."""
        self._require(Key.STREAM_STATS)
        resp = await self._request(lambda c: frames.StreamStats(c, name))
        return dict(resp.stats)

    async def resolve_offset(self, stream: str, offset: OffsetSpec | str | int) -> int:
        """The offset the server resolves ``offset`` to (ResolveOffsetSpec, key 31), e.g. the
        chunk a subscription at ``"last"`` or at a timestamp would start with."""
        self._require(Key.RESOLVE_OFFSET_SPEC)
        spec = OffsetSpec.parse(offset)
        resp = await self._request(
            lambda c: frames.ResolveOffsetSpec(c, stream, spec.type, spec.value))
        return int(resp.offset)

    # --- offsets and sequences -------------------------------------------------------------

    async def query_offset(self, reference: str, stream: str) -> int | None:
        """The offset stored for ``reference``, or None if none was stored."""
        resp = await self._request(lambda c: frames.QueryOffset(c, reference, stream),
                                   (Code.OK, Code.NO_OFFSET))
        return None if resp.code == Code.NO_OFFSET else int(resp.offset)

    async def store_offset(self, reference: str, stream: str, offset: int) -> None:
        """Fire and forget, as the protocol has it: the server does not answer."""
        self._conn.write(frames.encode(frames.StoreOffset(reference, stream, offset)))

    async def query_publisher_sequence(self, reference: str, stream: str) -> int:
        """The last publishing id stored for ``reference`` (0 if none)."""
        resp = await self._request(lambda c: frames.QueryPublisherSequence(c, reference, stream))
        return int(resp.sequence)

    # --- super streams ---------------------------------------------------------------------

    async def create_super_stream(
        self, name: str, partitions: list[str], binding_keys: list[str],
        arguments: dict[str, str] | None = None,
    ) -> None:
        self._require(Key.CREATE_SUPER_STREAM)
        await self._request(lambda c: frames.CreateSuperStream(
            c, name, list(partitions), list(binding_keys), dict(arguments or {})))

    async def delete_super_stream(self, name: str) -> None:
        self._require(Key.DELETE_SUPER_STREAM)
        await self._request(lambda c: frames.DeleteSuperStream(c, name))

    async def partitions(self, super_stream: str) -> list[str]:
        resp = await self._request(lambda c: frames.Partitions(c, super_stream))
        return list(resp.streams)

    async def route(self, routing_key: str, super_stream: str) -> list[str]:
        resp = await self._request(lambda c: frames.Route(c, routing_key, super_stream))
        return list(resp.streams)

    # --- producers and consumers -----------------------------------------------------------

    async def producer(
        self, stream: str, reference: str | None = None, max_unconfirmed: int = 20000,
        batch_size: int = 100, linger_ms: float = 0,
    ) -> Producer:
        """Declare a publisher. With a ``reference`` the server deduplicates by publishing id and
        ids continue after the last one it stored; without, they start at 1."""
        conn = self._conn
        next_id = 1
        if reference:
            next_id = await self.query_publisher_sequence(reference, stream) + 1
        pid = _free_id(conn.publishers, "publisher")
        producer = Producer(conn, stream, pid, reference, next_id, max_unconfirmed, batch_size,
                            linger_ms)
        conn.publishers[pid] = producer
        try:
            # no reference is an empty string: RabbitMQ rejects a null one as an unknown frame
            await self._request(lambda c: frames.DeclarePublisher(c, pid, reference or "", stream))
        except BaseException:
            if conn.publishers.get(pid) is producer:
                del conn.publishers[pid]
            raise
        return producer

    async def consumer(
        self, stream: str, offset: OffsetSpec | str | int = "first", credit: int = 10,
        name: str | None = None, properties: dict[str, str] | None = None,
        check_crc: bool = True,
    ) -> Consumer:
        """Subscribe. ``name`` is the consumer reference (stored offsets, single active
        consumer); ``check_crc`` verifies each chunk's CRC-32 before handing it out."""
        if not 1 <= credit <= 0xFFFF:
            raise ValueError("credit must be within 1..65535")
        spec = OffsetSpec.parse(offset)
        conn = self._conn
        props = dict(properties or {})
        if name:
            props.setdefault("name", name)
        sid = _free_id(conn.subscribers, "subscription", conn.header_subscribers)
        consumer = Consumer(self, conn, stream, sid, spec, credit, name, check_crc)
        conn.subscribers[sid] = consumer  # before Subscribe: chunks may follow its answer at once
        try:
            await self._request(lambda c: frames.Subscribe(
                c, sid, stream, spec.type, spec.value, credit, props))
        except BaseException:
            if conn.subscribers.get(sid) is consumer:
                del conn.subscribers[sid]
            raise
        return consumer

    # --- server events ---------------------------------------------------------------------

    def _metadata_update(self, stream: str, code: int) -> None:
        """The stream moved or went away: its producers and consumers here are gone."""
        exc = StreamletError(code, f"stream {stream!r} is not available")
        conn = self._conn
        for pid, publisher in list(conn.publishers.items()):
            if publisher.stream == stream:
                del conn.publishers[pid]
                publisher._on_closed(exc)
        for sid, subscriber in list(conn.subscribers.items()):
            if subscriber.stream == stream:
                del conn.subscribers[sid]
                subscriber._on_closed(exc)
        callbacks = self.on_metadata_update
        for cb in callbacks if isinstance(callbacks, list) else [callbacks]:
            try:
                result = cb(stream, code)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._callback_tasks.add(task)
                    task.add_done_callback(self._callback_tasks.discard)
            except Exception:
                log.exception("on_metadata_update callback failed")
