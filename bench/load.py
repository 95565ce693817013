"""The load itself: publishers with pre-encoded frames and consumers that count per chunk.

Publish frames are built once per publisher (a ring of them, one more than the confirm window
holds) and only their publishing ids are patched before each send, so the client spends its
time per frame, not per message. The ring lets a frame buffer be reused without copying:
a slot comes round again only after the window moved past it, so its bytes were confirmed and
the transport no longer holds them.
"""

from __future__ import annotations

import asyncio
import struct
import time
from array import array

from streamlet.rabbitmq.publish import PUBLISH_HEAD_SIZE, publish_frame, set_publish_head
from streamlet.storage.chunk import HEADER, HEADER_SIZE

from .client import Conn

_U64 = struct.Struct(">Q")
_TS_MSG = struct.Struct(">QIQ")  # publishing id, length, send timestamp (first body bytes)
_ENTRY_LEN = struct.Struct(">I")


def frame_template(pid: int, count: int, body: bytes) -> bytearray:
    """A whole Publish v1 frame of ``count`` copies of ``body``, ids 0.., to patch and send."""
    return bytearray(publish_frame(pid, [(i, body) for i in range(count)]))


class Publisher:
    """Publishes ``total`` messages of ``size`` bytes, ``batch`` per frame, keeping at most
    ``window`` unconfirmed; ``done`` resolves at the last confirm."""

    def __init__(self, conn: Conn, pid: int, total: int, size: int, batch: int = 100,
                 window: int = 20_000) -> None:
        if total % batch:
            raise ValueError(f"message count {total} is not a multiple of the batch {batch}")
        self.conn, self.pid, self.total, self.batch = conn, pid, total, batch
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
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
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
        while sent < total and sent - settled + batch <= window and not conn.paused:
            frame = slots[self.frames % len(slots)]
            pos = PUBLISH_HEAD_SIZE
            for i in range(sent, sent + batch):
                pack(frame, pos, i)
                pos += stride
            conn.send(frame)
            sent += batch
            self.frames += 1
        self.sent = sent

    def _settle(self) -> None:
        if self.confirmed + self.errored >= self.total and not self.done.done():
            self.finished = time.monotonic()
            self.done.set_result(None)

    def on_confirm(self, count: int) -> None:
        self.confirmed += count
        self._settle()

    def on_error(self, count: int) -> None:
        self.errored += count
        self._settle()


class RatePublisher:
    """Publishes at a fixed rate for ``duration`` seconds, each body starting with its send
    time (``time.monotonic_ns``, one clock for every process of the machine)."""

    def __init__(self, conn: Conn, pid: int, rate: int, duration: float, size: int,
                 tick: float = 0.001, max_batch: int = 100) -> None:
        self.conn, self.pid, self.rate, self.duration = conn, pid, rate, duration
        self.size, self.tick, self.max_batch = max(size, 8), tick, max_batch
        self.total = int(rate * duration)
        self.template = frame_template(pid, max_batch, bytes(self.size))
        self.sent = 0
        self.confirmed = 0
        self.errored = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.publishers[pid] = self

    async def run(self) -> None:
        start = time.monotonic()
        stride = 12 + self.size
        while self.sent < self.total:
            due = min(self.total, int((time.monotonic() - start) * self.rate) + 1)
            while self.sent < due:
                n = min(due - self.sent, self.max_batch)
                frame = self.template
                ts = time.monotonic_ns()
                pos = PUBLISH_HEAD_SIZE
                for i in range(self.sent, self.sent + n):
                    _TS_MSG.pack_into(frame, pos, i, self.size, ts)
                    pos += stride
                set_publish_head(frame, pos, self.pid, n)
                self.conn.send(bytes(frame[:pos]))
                self.sent += n
            await asyncio.sleep(self.tick)
        await self.done

    def pump(self) -> None:
        pass

    def on_confirm(self, count: int) -> None:
        self.confirmed += count
        if self.confirmed + self.errored >= self.total and not self.done.done():
            self.done.set_result(None)

    def on_error(self, count: int) -> None:
        self.errored += count
        self.on_confirm(0)


class CountingConsumer:
    """Counts records from chunk headers only; grants credit back in batches."""

    wants_data = False

    def __init__(self, conn: Conn, sub_id: int, expected: int, credit: int = 64,
                 credit_batch: int = 16) -> None:
        self.conn, self.sub_id, self.expected = conn, sub_id, expected
        self.initial_credit, self.credit_batch = credit, credit_batch
        self.records = 0
        self.chunks = 0
        self.data_bytes = 0
        self.owed = 0
        self.started = 0.0
        self.finished = 0.0
        self.grant = True
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if expected <= 0:
            self.done.set_result(None)

    def on_header(self, buf: bytearray, pos: int) -> None:
        (_, ctype, _, records, _, _, _, _, data_len, _, _) = HEADER.unpack_from(buf, pos)
        self.chunks += 1
        if ctype == 0:
            self.records += records
            self.data_bytes += data_len
        if self.grant:
            self.owed += 1
            if self.owed >= self.credit_batch:
                self.conn.credit(self.sub_id, self.owed)
                self.owed = 0
        if self.records >= self.expected and not self.done.done():
            self.finished = time.monotonic()
            self.done.set_result(None)

    def on_chunk(self, chunk: memoryview) -> None:
        self.on_header(bytearray(chunk[:HEADER_SIZE]), 0)


class LatencyConsumer:
    """Reads every record's send timestamp and keeps publish-to-deliver latencies (ns)."""

    wants_data = True

    def __init__(self, conn: Conn, sub_id: int, expected: int, skip_before_ns: int = 0,
                 credit_batch: int = 1) -> None:
        self.conn, self.sub_id, self.expected = conn, sub_id, expected
        self.credit_batch = credit_batch
        self.skip_before_ns = skip_before_ns
        self.latencies = array("q")
        self.records = 0
        self.chunks = 0
        self.owed = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_header(self, buf: bytearray, pos: int) -> None:  # pragma: no cover - wants_data
        raise AssertionError("LatencyConsumer reads whole chunks")

    def on_chunk(self, chunk: memoryview) -> None:
        now = time.monotonic_ns()
        (_, ctype, _, records, _, _, _, _, data_len, _, _) = HEADER.unpack_from(chunk, 0)
        self.chunks += 1
        self.owed += 1
        if self.owed >= self.credit_batch:
            self.conn.credit(self.sub_id, self.owed)
            self.owed = 0
        if ctype != 0:
            return
        pos, end = HEADER_SIZE, HEADER_SIZE + data_len
        lat, skip, unpack = self.latencies, self.skip_before_ns, _ENTRY_LEN.unpack_from
        while pos < end:
            n = unpack(chunk, pos)[0]
            ts = _U64.unpack_from(chunk, pos + 4)[0]
            if ts >= skip:
                lat.append(now - ts)
            pos += 4 + n
        self.records += records
        if self.records >= self.expected and not self.done.done():
            self.done.set_result(None)


def percentile(sorted_values: list[int] | array[int], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return float(sorted_values[k])
