"""Talking to the broker from Spark's Python workers: short synchronous calls around the
asyncio client (each opens its own connection and event loop; workers are plain processes)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from streamlet.client import Client, OffsetSpec, connect
from streamlet.storage.chunk import CHUNK_USER, ChunkHeader

from .offsets import Bound, Range
from .options import Options

T = TypeVar("T")


async def open_client(opts: Options) -> Client:
    return await connect(opts.host, opts.port, user=opts.user, password=opts.password,
                         vhost=opts.vhost, timeout=opts.timeout, ssl=opts.ssl_context(),
                         connection_name="streamlet-spark")


def call(opts: Options, fn: Callable[[Client], Awaitable[T]]) -> T:
    """Run ``fn(client)`` on a fresh connection and close it."""
    async def main() -> T:
        client = await open_client(opts)
        try:
            return await fn(client)
        finally:
            await client.close()
    return asyncio.run(main())


async def partition_streams(client: Client, opts: Options) -> list[str]:
    """The streams read or written: the one stream, or the super stream's partitions in order."""
    if opts.stream:
        return [opts.stream]
    assert opts.super_stream
    return await client.partitions(opts.super_stream)


async def end_offset(client: Client, stream: str) -> int:
    """One after the newest record (the offset the next message will get)."""
    return await client.resolve_offset(stream, OffsetSpec.next())


async def user_end(client: Client, stream: str, timeout: float,
                   known: dict[str, tuple[int, int]]) -> int:
    """One after the newest user record: the end of the last user chunk. Stored offsets
    (StoreOffset) are tracking chunks written after it: they take offsets, but hold nothing
    to read, so they do not count (else each stored offset would look like new data).

    The last user chunk's header is fetched to learn its size, once per chunk: ``known``
    keeps ``{stream: (last user chunk, its end)}`` between calls. A stream without user
    chunks gives its first offset."""
    last = await client.resolve_offset(stream, OffsetSpec.last())
    if stream in known and known[stream][0] == last:
        return known[stream][1]
    if last >= await end_offset(client, stream):  # "last" resolves to the end: no user chunk
        return await client.resolve_offset(stream, OffsetSpec.first())
    consumer = await client.consumer(stream, offset=last, credit=1, check_crc=False)
    try:
        while True:
            got = await asyncio.wait_for(consumer.next_raw_chunk(), timeout)
            if got is None:
                raise ConnectionError(f"the subscription to {stream} ended")
            if got[0].chunk_type == CHUNK_USER:
                break
    finally:
        await consumer.close()
    header = got[0]
    if header.chunk_id == last:
        known[stream] = (last, header.next_offset)
    return header.next_offset  # a later chunk if retention removed this one meanwhile


async def resolve(client: Client, stream: str, bound: Bound) -> int:
    """The offset a bound means now, within ``[first, end]``."""
    first = await client.resolve_offset(stream, OffsetSpec.first())
    end = await end_offset(client, stream)
    if bound.kind == "first":
        return first
    if bound.kind == "last":
        return end
    if bound.kind == "timestamp":
        return await client.resolve_offset(stream, OffsetSpec.timestamp(bound.value))
    return min(max(bound.value, first), end)


async def chunk_start(client: Client, stream: str, offset: int) -> int:
    """The first offset of the chunk holding ``offset``: one chunk is fetched to learn it."""
    consumer = await client.consumer(stream, offset=offset, credit=1, check_crc=False)
    try:
        got = await consumer.next_raw_chunk()
        return offset if got is None else got[0].chunk_id
    finally:
        await consumer.close()


Chunk = tuple[ChunkHeader, memoryview]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """A private event loop (uvloop when installed) running in a thread of its own.

    Spark calls ``read``/``write`` code synchronously and does its own work between our calls;
    a loop run only inside each call would stand still then, and a connection on it would send
    no heartbeat: a stage slower than two heartbeat intervals between calls would lose it. On a
    thread of its own the loop keeps the connection alive whatever Spark does in between."""

    def __init__(self) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="streamlet-spark-io",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


@contextlib.contextmanager
def session(opts: Options) -> Iterator[tuple[LoopThread, Client]]:
    """A loop thread and a connection on it, for the sync code Spark runs in its workers
    (``read``, ``write``); both closed on exit, also when a generator using them is abandoned."""
    io = LoopThread()
    client: Client | None = None
    try:
        client = io.run(open_client(opts))
        yield io, client
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                io.run(client.close())
        io.close()


def iter_chunk_groups(opts: Options, rng: Range, min_records: int, credit: int = 16
                      ) -> Iterator[list[Chunk]]:
    """The user chunks holding ``[rng.start, rng.end)``, in order, in groups of at least
    ``min_records`` records (the last group may be smaller); a sync generator (Spark's ``read``
    is one) driving its own event loop, once per group rather than once per chunk, and closed
    cleanly if abandoned.

    The broker sends user chunks only, but tracking chunks (stored offsets) take offsets too,
    so a range may end in offsets no chunk will ever be sent for. The last user chunk is
    asked first: reading stops at it, or at the first chunk reaching the range's end.

    ``credit`` chunks may be in flight: enough to keep the broker sending while a chunk is
    decoded (8 measured about 10% slower), bounded memory (chunks are at most 4 MB)."""
    if rng.end <= rng.start:
        return
    with session(opts) as (io, client):
        last = io.run(client.resolve_offset(rng.stream, OffsetSpec.last()))
        end = io.run(end_offset(client, rng.stream))
        if last >= end:
            return  # no user chunk at all ("last" resolves to the end then)
        consumer = io.run(
            client.consumer(rng.stream, offset=min(rng.start, last), credit=credit))
        done = False

        async def take() -> list[Chunk]:
            nonlocal done
            group: list[Chunk] = []
            records = 0
            while records < min_records:
                got = await asyncio.wait_for(consumer.next_raw_chunk(), opts.timeout)
                if got is None or got[0].chunk_id >= rng.end:
                    done = True
                    break
                header = got[0]
                if header.chunk_type == CHUNK_USER and header.next_offset > rng.start:
                    group.append(got)
                    records += header.num_records
                if header.next_offset >= rng.end or header.chunk_id >= last:
                    done = True
                    break
            return group

        while not done:
            group = io.run(take())
            if group:
                yield group
