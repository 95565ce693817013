"""A subscription: chunks arrive from the connection into a queue; the application takes them
as messages (``async for``) or as whole chunks (:meth:`Consumer.chunks`).

Flow control is by chunk: the subscription starts with ``credit`` chunks and gives credit back
as the application takes chunks from the queue: in batches of a quarter of the credit (one Credit
frame per batch, not per chunk), and all it owes whenever the queue runs empty, so the broker
never waits on us. At most ``credit`` chunks wait in memory however slow the application is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Generator, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..rabbitmq import Code, OffsetType, frames
from ..rabbitmq.frames import encode
from ..storage.chunk import CHUNK_USER, ChunkHeader, crc32, iter_records
from .errors import StreamletError
from .offsets import OffsetSpec

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger(__name__)


class Message(NamedTuple):
    offset: int
    body: bytes
    timestamp: int  # the chunk's timestamp, ms since the epoch
    chunk_id: int  # offset of the chunk's first record


Chunk = tuple[ChunkHeader, list[Any], int]
"""``(header, records, first_offset)``: records are bytes (memoryviews with ``copy=False``)."""


def chunk_records(
    header: ChunkHeader, data: memoryview | bytes, min_offset: int
) -> tuple[int, Iterator[bytes | memoryview]]:
    """The records of a chunk at or after ``min_offset``, and the offset of the first one.

    A subscription at offset N starts with the chunk that holds N, so the records before N in
    that chunk are skipped here, as every client does."""
    records = iter_records(data)
    skip = min_offset - header.chunk_id
    if skip <= 0:
        return header.chunk_id, records
    return header.chunk_id + skip, islice(records, skip, None)


class _Closed(Exception):
    """Queue marker: the consumer was closed by the application."""


class Offsets(Protocol):
    """Where a named consumer stores and reads its offset: the Client that made it."""

    async def query_offset(self, reference: str, stream: str) -> int | None: ...
    async def store_offset(self, reference: str, stream: str, offset: int) -> None: ...


class Consumer:
    """Created by :meth:`Client.consumer`; see docs/client.md."""

    def __init__(
        self, client: Offsets, conn: Connection, stream: str, subscription_id: int,
        spec: OffsetSpec, credit: int, name: str | None, check_crc: bool = True,
    ) -> None:
        self.stream = stream
        self.subscription_id = subscription_id
        self.spec = spec
        self.credit = credit
        self.name = name
        self.check_crc = check_crc
        #: False while a single-active-consumer group keeps this one passive
        self.active = True
        #: offset of the last message handed to the application (None before the first)
        self.last_offset: int | None = None
        self._client = client
        self._conn = conn
        #: chunks taken whose credit is not given back yet, and how many to give back at once
        self._owed = 0
        self._credit_batch = max(1, credit // 4)
        self._min_offset = spec.value if spec.type == OffsetType.OFFSET else 0
        self._queue: deque[tuple[ChunkHeader, memoryview]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._end: BaseException | None = None
        # the chunk being iterated message by message
        self._records: Iterator[tuple[int, bytes | memoryview]] | None = None
        self._chunk: ChunkHeader | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def closed(self) -> bool:
        return self._end is not None

    @property
    def next_offset(self) -> int | None:
        """Where a new subscription would resume: one after the last message handed out."""
        return None if self.last_offset is None else self.last_offset + 1

    # --- messages --------------------------------------------------------------------------

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        while True:
            records = self._records
            if records is not None:
                item = next(records, None)
                if item is not None:
                    offset, record = item
                    self.last_offset = offset
                    chunk = self._chunk
                    assert chunk is not None
                    return Message(offset, bytes(record), chunk.timestamp, chunk.chunk_id)
                self._records = None
            got = await self._next_chunk()
            if got is None:
                raise StopAsyncIteration
            header, data = got
            first, it = chunk_records(header, data, self._min_offset)
            self._chunk = header
            self._records = enumerate(it, first)

    # --- chunks ----------------------------------------------------------------------------

    def chunks(self, copy: bool = True) -> _ChunkIterator:
        """Iterate ``(header, records, first_offset)``, one per chunk (use with ``async for``;
        awaiting it first also works). ``copy=False`` gives records as memoryviews over the
        received frame: no copy per record."""
        return _ChunkIterator(self, copy)

    async def _next_batch(self, copy: bool) -> Chunk | None:
        if self._records is not None:  # the rest of a chunk started message by message
            rest = list(self._records)
            self._records = None
            assert self._chunk is not None
            if rest:
                self.last_offset = rest[-1][0]
                recs = [bytes(r) if copy else r for _, r in rest]
                return self._chunk, recs, rest[0][0]
        while True:
            got = await self._next_chunk()
            if got is None:
                return None
            header, data = got
            first, it = chunk_records(header, data, self._min_offset)
            records: list[Any] = [bytes(r) for r in it] if copy else list(it)
            if records:
                self.last_offset = first + len(records) - 1
                return header, records, first

    async def next_raw_chunk(self) -> tuple[ChunkHeader, memoryview] | None:
        """The next chunk undecoded, tracking chunks included (see ``header.chunk_type``; they
        take offsets too): its header and data (CRC checked), or None once closed. For bulk
        readers that decode records themselves (the Spark data source); do not mix with
        message iteration."""
        return await self._next_chunk(user_only=False)

    # --- the queue -------------------------------------------------------------------------

    async def _next_chunk(self, user_only: bool = True) -> tuple[ChunkHeader, memoryview] | None:
        """The next user chunk (any chunk without ``user_only``), or None once closed; raises
        the reason the subscription ended (after the chunks received before it)."""
        while True:
            queue = self._queue
            if queue:
                header, data = queue.popleft()
                self._owed += 1
                if (self._owed >= self._credit_batch or not queue) \
                        and self._conn.closed is None and self._end is None:
                    self._conn.write(encode(frames.Credit(self.subscription_id, self._owed)))
                    self._owed = 0
                if user_only and header.chunk_type != CHUNK_USER:
                    continue
                if self.check_crc and crc32(data) != header.data_crc:
                    raise StreamletError(
                        Code.INTERNAL_ERROR, f"chunk {header.chunk_id} of {self.stream}: bad CRC")
                return header, data
            if self._end is not None:
                if isinstance(self._end, _Closed):
                    return None
                raise self._end
            self._waiter = self._conn.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # --- offsets and closing ---------------------------------------------------------------

    async def store_offset(self, offset: int) -> None:
        """Store ``offset`` on the server under this consumer's name (no answer is sent)."""
        if not self.name:
            raise ValueError("store_offset needs a consumer created with a name")
        await self._client.store_offset(self.name, self.stream, offset)

    async def close(self) -> None:
        """Unsubscribe; iteration then ends (chunks not yet taken are dropped)."""
        if self._end is not None:
            return
        self._end = _Closed()
        self._queue.clear()
        self._records = None
        self._wake()
        conn = self._conn
        if conn.subscribers.get(self.subscription_id) is self:
            del conn.subscribers[self.subscription_id]
            with contextlib.suppress(StreamletError):
                await conn.request(
                    frames.Unsubscribe(conn.next_correlation(), self.subscription_id),
                    ok=(Code.OK, Code.SUBSCRIPTION_ID_DOES_NOT_EXIST))

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- called by the connection ----------------------------------------------------------

    def _on_chunk(self, header: ChunkHeader, data: memoryview) -> None:
        self._queue.append((header, data))
        self._wake()

    def _on_closed(self, exc: StreamletError) -> None:
        if self._end is None:
            self._end = exc
        self._wake()

    def _on_consumer_update(self, correlation_id: int, active: bool) -> None:
        task = self._conn.loop.create_task(self._answer_consumer_update(correlation_id, active))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer_consumer_update(self, correlation_id: int, active: bool) -> None:
        """Single active consumer: the newly active one resumes after its stored offset, else
        from its own spec; a passive one answers with type 0 (no change)."""
        self.active = active
        spec_type, value = 0, 0
        if active:
            spec = self.spec
            if self.name:
                try:
                    stored = await self._client.query_offset(self.name, self.stream)
                except StreamletError as e:
                    log.warning("query_offset for %s failed: %s", self.name, e)
                    stored = None
                if stored is not None:
                    spec = OffsetSpec.offset(stored + 1)
            self._min_offset = spec.value if spec.type == OffsetType.OFFSET else 0
            spec_type, value = spec.type, spec.value
        with contextlib.suppress(StreamletError):
            self._conn.write(encode(frames.ConsumerUpdateResponse(
                correlation_id, Code.OK, spec_type, value)))


class _ChunkIterator:
    """``async for`` over chunks; ``await`` returns itself so ``await consumer.chunks()`` works."""

    def __init__(self, consumer: Consumer, copy: bool) -> None:
        self._consumer = consumer
        self._copy = copy

    def __await__(self) -> Generator[Any, None, _ChunkIterator]:
        return self._self().__await__()

    async def _self(self) -> _ChunkIterator:
        return self

    def __aiter__(self) -> _ChunkIterator:
        return self

    async def __anext__(self) -> Chunk:
        got = await self._consumer._next_batch(self._copy)
        if got is None:
            raise StopAsyncIteration
        return got
