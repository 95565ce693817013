"""A publisher: batches messages into Publish frames and counts confirms.

Messages are kept as (publishing id, body) and encoded into a frame by the codec's
``publish_frame`` (one struct call each, one join a frame), so one core builds millions a second.
Confirms are counted, not matched id by id: ``flush`` waits until every message sent has been
confirmed or rejected, which is what callers need and costs nothing per message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from itertools import islice
from typing import TYPE_CHECKING

from ..rabbitmq import Code, frames
from ..rabbitmq.publish import MESSAGE_HEAD_SIZE, PUBLISH_HEAD_SIZE, publish_frame
from .errors import StreamletError

if TYPE_CHECKING:
    from .connection import Connection

_PER_MESSAGE = MESSAGE_HEAD_SIZE
_MAX_ENTRY = 0x7FFFFFFF  # a simple entry's length has 31 bits


class PublishFailed(StreamletError):
    """The server rejected some messages (PublishError): ``errors`` is [(publishing id, code)]."""

    def __init__(self, errors: list[tuple[int, int]]) -> None:
        pid, code = errors[0]
        super().__init__(code, f"{len(errors)} message(s) rejected, first publishing id {pid}")
        self.errors = errors


class Producer:
    """Created by :meth:`Client.producer`; see docs/client.md."""

    def __init__(
        self, conn: Connection, stream: str, publisher_id: int, reference: str | None,
        next_id: int, max_unconfirmed: int, batch_size: int, linger_ms: float,
    ) -> None:
        if max_unconfirmed < 1 or batch_size < 1:
            raise ValueError("max_unconfirmed and batch_size must be at least 1")
        self.stream = stream
        self.publisher_id = publisher_id
        self.reference = reference
        self.max_unconfirmed = max_unconfirmed
        self.batch_size = batch_size
        self.linger = linger_ms / 1000.0
        self.confirmed_count = 0
        self.error_count = 0
        self.last_confirmed: int | None = None
        self._conn = conn
        self._loop = conn.loop
        self._next_id = next_id
        # room for messages in one frame, after the frame's own 13 bytes
        self._max_payload = conn.frame_max - PUBLISH_HEAD_SIZE if conn.frame_max else 1 << 62
        self._pending: list[tuple[int, bytes]] = []  # (publishing id, body)
        self._pending_bytes = 0
        self._unconfirmed = 0
        self._errors: list[tuple[int, int]] = []
        self._wakeup: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._closed: StreamletError | None = None
        self._closing = False

    @property
    def next_publishing_id(self) -> int:
        """The id :meth:`send` gives the next message sent without an explicit one."""
        return self._next_id

    @property
    def unconfirmed(self) -> int:
        """Messages sent (or buffered) and neither confirmed nor rejected yet."""
        return self._unconfirmed

    @property
    def closed(self) -> bool:
        return self._closed is not None

    # --- sending ---------------------------------------------------------------------------

    async def send(self, body: bytes, publishing_id: int | None = None) -> int:
        """Queue one message; return its publishing id. Waits only while ``max_unconfirmed``
        messages are unconfirmed. An explicit id also moves the automatic sequence past it."""
        if self._closed is not None:
            raise self._closed
        if len(body) + _PER_MESSAGE > self._max_payload or len(body) > _MAX_ENTRY:
            raise StreamletError(
                Code.FRAME_TOO_LARGE,
                f"a message of {len(body)} bytes does not fit frame_max {self._conn.frame_max}")
        if self._unconfirmed >= self.max_unconfirmed:
            await self._wait_room(1)
        if publishing_id is None:
            publishing_id = self._next_id
            self._next_id += 1
        elif publishing_id >= self._next_id:
            self._next_id = publishing_id + 1
        self._append(publishing_id, body)
        return publishing_id

    async def send_many(self, bodies: Iterable[bytes], first_id: int | None = None) -> int:
        """Send ``bodies`` with consecutive publishing ids, whole frames at a time; return the
        last id (``first - 1`` if ``bodies`` is empty). The ids start at ``first_id`` when given
        (deterministic ids, e.g. a Spark task's), else at :attr:`next_publishing_id`."""
        self._write_pending()  # keep the order of earlier single sends
        next_id = self._next_id if first_id is None else first_id
        it = iter(bodies)
        conn, size = self._conn, self.batch_size
        while batch := list(islice(it, size)):
            n = len(batch)
            if self._unconfirmed + n > self.max_unconfirmed:
                await self._wait_room(n)
            if conn.paused:
                await conn.drain()
            if self._closed is not None:
                raise self._closed
            if sum(map(len, batch)) + _PER_MESSAGE * n > self._max_payload:
                for body in batch:  # too big for one frame: let _append cut it
                    await self.send(body, publishing_id=next_id)
                    next_id += 1
                continue
            self._unconfirmed += n
            conn.write(publish_frame(self.publisher_id, enumerate(batch, next_id)))
            next_id += n
            if next_id > self._next_id:
                self._next_id = next_id
        if self._closed is not None:
            raise self._closed
        self._write_pending()
        return next_id - 1

    def _append(self, publishing_id: int, body: bytes) -> None:
        size = _PER_MESSAGE + len(body)
        if self._pending_bytes + size > self._max_payload:
            self._write_pending()
        self._pending.append((publishing_id, body))
        self._pending_bytes += size
        self._unconfirmed += 1
        if len(self._pending) >= self.batch_size:
            self._write_pending()
        elif self._timer is None:
            self._timer = (self._loop.call_later(self.linger, self._write_pending) if self.linger
                           else self._loop.call_soon(self._write_pending))

    def _write_pending(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending = self._pending
        if not pending or self._closed is not None:
            return
        self._pending = []
        self._pending_bytes = 0
        self._conn.write(publish_frame(self.publisher_id, pending))

    async def _wait_room(self, n: int) -> None:
        # n > max_unconfirmed can never fit beside others: then wait for an empty window
        limit = max(self.max_unconfirmed - n, 0)
        while self._unconfirmed > limit:
            self._write_pending()  # what we wait for must be on the wire
            await self._wait()

    async def _wait(self) -> None:
        if self._closed is not None:
            raise self._closed
        if self._wakeup is None or self._wakeup.done():  # done: a waiter before us was cancelled
            self._wakeup = self._loop.create_future()
        await self._wakeup
        if self._closed is not None:
            raise self._closed

    def _wake(self) -> None:
        if self._wakeup is not None:
            if not self._wakeup.done():  # a waiter cancelled (a timeout) leaves a done future
                self._wakeup.set_result(None)
            self._wakeup = None

    async def flush(self) -> None:
        """Wait until every message sent so far is confirmed or rejected. Raises
        :class:`PublishFailed` (once) if the server rejected any."""
        self._write_pending()
        while self._unconfirmed > 0:
            await self._wait()
        if self._errors:
            errors, self._errors = self._errors, []
            raise PublishFailed(errors)

    async def close(self) -> None:
        """Flush, then delete the publisher on the server. Errors of the flush are raised."""
        if self._closing:
            return
        self._closing = True
        try:
            if self._closed is None:
                await self.flush()
        finally:
            conn = self._conn
            if self._closed is None and conn.publishers.get(self.publisher_id) is self:
                del conn.publishers[self.publisher_id]
                with contextlib.suppress(StreamletError):
                    await conn.request(
                        frames.DeletePublisher(conn.next_correlation(), self.publisher_id),
                        ok=(Code.OK, Code.PUBLISHER_DOES_NOT_EXIST))
            if self._closed is None:
                self._closed = StreamletError(Code.PUBLISHER_DOES_NOT_EXIST, "producer closed")
            self._wake()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- called by the connection ----------------------------------------------------------

    def _on_confirm(self, ids: tuple[int, ...]) -> None:
        n = len(ids)
        if not n:
            return
        self._unconfirmed = max(self._unconfirmed - n, 0)
        self.confirmed_count += n
        top = max(ids)
        if self.last_confirmed is None or top > self.last_confirmed:
            self.last_confirmed = top
        self._wake()

    def _on_publish_error(self, errors: list[tuple[int, int]]) -> None:
        self._unconfirmed = max(self._unconfirmed - len(errors), 0)
        self.error_count += len(errors)
        self._errors.extend(errors)
        self._wake()

    def _on_closed(self, exc: StreamletError) -> None:
        if self._closed is None:
            self._closed = exc
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = []
        self._pending_bytes = 0
        self._wake()
