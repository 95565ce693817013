"""The load itself: publishers with pre-encoded frames and consumers that count per chunk, on
perf's connections (bench/client.py), whose ``publishers`` and ``subscribers`` tables they join.

Publish frames are built once per publisher with the codec's ``publish_frame`` (a ring of them,
one more than the confirm window holds) and only their publishing ids are patched before each
send, so the client spends its time per frame, not per message. The ring lets a frame buffer be
reused without copying: a slot comes round again only after the window moved past it, so its
bytes were confirmed and the transport no longer holds them. Latency is perf's: bodies start
with their send time (``time.time_ns``) and streamlet.perf.consumer reads them.
"""

from __future__ import annotations

import asyncio
import struct
import time

from streamlet.client import StreamletError
from streamlet.client.connection import Connection
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Code
from streamlet.rabbitmq.publish import PUBLISH_HEAD_SIZE, publish_frame, set_publish_head
from streamlet.storage.chunk import CHUNK_USER, HEADER_SIZE, MAGIC_VERSION
from streamlet.storage.chunk import HEADER as _CHUNK_HEADER

_U64 = struct.Struct(">Q")
_TS_MSG = struct.Struct(">QIQ")  # publishing id, length, send timestamp (first body bytes)


def frame_template(pid: int, count: int, body: bytes) -> bytearray:
    """A whole Publish v1 frame of ``count`` copies of ``body``, ids 0.., to patch and send."""
    return bytearray(publish_frame(pid, [(i, body) for i in range(count)]))


class _Role:
    """What every role does when its connection or its stream goes: note why (unless it was
    our own close) and end."""

    errors: list[str]
    done: asyncio.Future[None]
    finished = 0.0

    def _on_closed(self, exc: StreamletError) -> None:
        if exc.code != Code.OK:
            self.errors.append(str(exc))
        if not self.done.done():
            self.finished = time.monotonic()
            self.done.set_result(None)


class Publisher(_Role):
    """Publishes ``total`` messages of ``size`` bytes, ``batch`` per frame, keeping at most
    ``window`` unconfirmed; ``done`` resolves at the last confirm (or when the publisher is
    closed: ``errors`` says why)."""

    def __init__(self, conn: Connection, pid: int, stream: str, total: int, size: int,
                 batch: int = 100, window: int = 20_000) -> None:
        if total % batch:
            raise ValueError(f"message count {total} is not a multiple of the batch {batch}")
        self.conn, self.pid, self.stream, self.total, self.batch = conn, pid, stream, total, batch
        self.window = max(window, batch)
        body = bytes(range(256)) * (size // 256) + bytes(size % 256)
        self.slots = [frame_template(pid, batch, body) for _ in range(self.window // batch + 2)]
        self.stride = 12 + size
        self.sent = 0
        self.confirmed = 0
        self.errored = 0
        self.frames = 0
        self.started = 0.0
        self.finished = 0.0
        self.errors: list[str] = []
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._resumer: asyncio.Task[None] | None = None
        conn.publishers[pid] = self

    def start(self) -> None:
        self.started = time.monotonic()
        self.pump()

    def pump(self) -> None:
        if not self.started:
            return
        conn, batch, window, total = self.conn, self.batch, self.window, self.total
        slots, stride, pack = self.slots, self.stride, _U64.pack_into
        sent, settled = self.sent, self.confirmed + self.errored
        write = conn.write  # the slot itself: the ring keeps it until it is confirmed
        while (sent < total and sent - settled + batch <= window and not conn.paused
               and conn.closed is None):
            frame = slots[self.frames % len(slots)]
            pos = PUBLISH_HEAD_SIZE
            for i in range(sent, sent + batch):
                pack(frame, pos, i)
                pos += stride
            write(frame)
            sent += batch
            self.frames += 1
        self.sent = sent
        if sent < total and conn.paused and self._resumer is None and conn.closed is None:
            # Nothing else would pump again: with every frame confirmed, no confirm is coming
            # (other publishers' bytes on the connection can hold it paused past our last one).
            self._resumer = asyncio.get_running_loop().create_task(self._resume())

    async def _resume(self) -> None:
        try:
            await self.conn.drain()
        except StreamletError:
            return  # closed: _on_closed ends the role
        finally:
            self._resumer = None
        self.pump()

    def _settle(self) -> None:
        if self.confirmed + self.errored >= self.total and not self.done.done():
            self.finished = time.monotonic()
            self.done.set_result(None)

    # --- the connection's callbacks (PublisherHandler) -------------------------------------

    def _on_confirm(self, ids: tuple[int, ...]) -> None:
        self.confirmed += len(ids)
        self._settle()
        self.pump()

    def _on_publish_error(self, errors: list[tuple[int, int]]) -> None:
        self.errors.append(f"publish errors: {errors[:3]}...")
        self.errored += len(errors)
        self._settle()
        self.pump()


class RatePublisher(_Role):
    """Publishes at a fixed rate for ``duration`` seconds, each body starting with its send
    time (``time.time_ns``, the clock streamlet.perf's consumer reads it by)."""

    def __init__(self, conn: Connection, pid: int, stream: str, rate: int, duration: float,
                 size: int, tick: float = 0.001, max_batch: int = 100) -> None:
        self.conn, self.pid, self.stream, self.rate = conn, pid, stream, rate
        self.duration = duration
        self.size, self.tick, self.max_batch = max(size, 8), tick, max_batch
        self.total = int(rate * duration)
        self.template = frame_template(pid, max_batch, bytes(self.size))
        self.sent = 0
        self.confirmed = 0
        self.errored = 0
        self.errors: list[str] = []
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.publishers[pid] = self

    async def run(self) -> None:
        start = time.monotonic()
        stride = 12 + self.size
        while self.sent < self.total and self.conn.closed is None:
            due = min(self.total, int((time.monotonic() - start) * self.rate) + 1)
            while self.sent < due:
                n = min(due - self.sent, self.max_batch)
                frame = self.template
                ts = time.time_ns()
                pos = PUBLISH_HEAD_SIZE
                for i in range(self.sent, self.sent + n):
                    _TS_MSG.pack_into(frame, pos, i, self.size, ts)
                    pos += stride
                set_publish_head(frame, pos, self.pid, n)
                self.conn.write(bytes(frame[:pos]))
                self.sent += n
            await asyncio.sleep(self.tick)
        await self.done

    def _settle(self) -> None:
        if self.confirmed + self.errored >= self.total and not self.done.done():
            self.done.set_result(None)

    def _on_confirm(self, ids: tuple[int, ...]) -> None:
        self.confirmed += len(ids)
        self._settle()

    def _on_publish_error(self, errors: list[tuple[int, int]]) -> None:
        self.errors.append(f"publish errors: {errors[:3]}...")
        self.errored += len(errors)
        self._settle()


class CountingConsumer(_Role):
    """Counts records and data bytes per chunk from the chunk header alone (one of the
    connection's ``header_subscribers``: no header object, no data view), giving credit back
    in batches."""

    def __init__(self, conn: Connection, sub_id: int, stream: str, expected: int,
                 credit: int = 64, credit_batch: int = 16) -> None:
        self.conn, self.sub_id, self.stream, self.expected = conn, sub_id, stream, expected
        self.initial_credit, self.credit_batch = credit, credit_batch
        self.records = 0
        self.chunks = 0
        self.data_bytes = 0
        self.owed = 0
        self.started = 0.0
        self.finished = 0.0
        self.grant = True
        self.errors: list[str] = []
        self._credit = f.encode(f.Credit(sub_id, credit_batch))
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if expected <= 0:
            self.done.set_result(None)
        conn.header_subscribers[sub_id] = self

    # --- the connection's callbacks (HeaderSubscriberHandler) ------------------------------

    def _on_chunk_header(self, frame: memoryview, pos: int) -> None:
        magic, ctype, _, records, _, _, _, _, data_len, _, _ = _CHUNK_HEADER.unpack_from(frame, pos)
        if magic != MAGIC_VERSION or len(frame) - pos - HEADER_SIZE < data_len:  # the
            raise ValueError(f"bad chunk in Deliver (magic {magic:#04x})")  # connection closes
        self.chunks += 1
        if ctype == CHUNK_USER:
            self.records += records
            self.data_bytes += data_len
        if self.grant:
            self.owed += 1
            if self.owed >= self.credit_batch:
                self.conn.write(self._credit)
                self.owed = 0
        if self.records >= self.expected and not self.done.done():
            self.finished = time.monotonic()
            self.done.set_result(None)

    def _on_consumer_update(self, correlation_id: int, active: bool) -> None:
        pass  # no single-active-consumer name is given, so the server sends none
