"""A perf producer: Publish frames of ``batch`` messages, each body starting with its send time,
at most ``window`` unconfirmed, at a fixed rate or as fast as confirms allow.

The frame is one buffer built once (the codec's ``publish_frame``); before each send only the
publishing ids and the send time are patched in (one ``struct`` call a message), so the cost is per frame, not per byte.
Confirm latency is measured per frame: the sent frames wait in a queue in id order and each
confirm settles the ranges it covers."""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from collections.abc import MutableSequence

from ..client import StreamletError
from ..client.connection import Connection
from ..rabbitmq.publish import MESSAGE_HEAD_SIZE, PUBLISH_HEAD_SIZE, publish_frame, set_publish_head
from . import stats

_MSG = struct.Struct(">QIQ")  # publishing id, body length, send time (the body's first 8 bytes)

#: seconds between rate checks when publishing at a fixed rate
TICK_S = 0.001


def contiguous_runs(ids: tuple[int, ...] | list[int]) -> list[tuple[int, int]]:
    """The ids as (first, last) ranges of consecutive values, sorted."""
    runs: list[tuple[int, int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        elif not runs or i > runs[-1][1]:
            runs.append((i, i))
    return runs


class PerfProducer:
    """One publisher on its own connection; ``counters[slot:slot+3]`` hold its sent,
    confirmed and errored counts for the command to read."""

    def __init__(self, conn: Connection, pid: int, stream: str, size: int, batch: int,
                 window: int, rate: float, counters: MutableSequence[int], slot: int) -> None:
        self.conn, self.pid, self.stream = conn, pid, stream
        self.size, self.rate = size, rate
        self.window = max(window, 1)
        self.batch = max(1, min(batch, self.window))
        self.counters, self.slot = counters, slot
        body = bytes(8) + (bytes(range(256)) * (size // 256 + 1))[: size - 8]  # time, filler
        self.frame = bytearray(publish_frame(pid, [(0, body)] * self.batch))
        self.sent = self.confirmed = self.errored = 0
        #: sent frames not wholly settled: [first id, last id, send time ns, unsettled]
        self.inflight: deque[list[int]] = deque()
        self.hist: stats.Histogram = {}
        self.max_us = 0
        self.stopping = False
        self.closed: StreamletError | None = None
        self._wake: asyncio.Future[None] | None = None

    # --- publishing ------------------------------------------------------------------------

    async def run(self) -> None:
        """Publish until :meth:`stop`; returns without waiting for the last confirms."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        while not self.stopping and self.closed is None:
            if self.conn.paused:
                await self.conn.drain()
                continue
            room = self.window - (self.sent - self.confirmed - self.errored)
            if self.rate > 0:
                due = int((time.monotonic() - started) * self.rate) + 1 - self.sent
                n = min(room, due)
            else:  # whole frames only, unless the window itself is smaller than one
                n = room - room % self.batch
            if n <= 0:
                if self.rate > 0 and room > 0:
                    await asyncio.sleep(TICK_S)
                else:
                    self._wake = loop.create_future()
                    await self._wake
                continue
            while n > 0 and not self.conn.paused:
                k = min(n, self.batch)
                self._send(k)
                n -= k
            await asyncio.sleep(0)  # let confirms and the command's polls in

    def _send(self, n: int) -> None:
        frame, size, pack = self.frame, self.size, _MSG.pack_into
        stride = MESSAGE_HEAD_SIZE + size
        first = self.sent
        now = time.time_ns()
        pos = PUBLISH_HEAD_SIZE
        for i in range(first, first + n):
            pack(frame, pos, i, size, now)
            pos += stride
        set_publish_head(frame, pos, self.pid, n)
        self.conn.write(bytes(frame[:pos]) if n < self.batch else bytes(frame))
        self.inflight.append([first, first + n - 1, now, n])
        self.sent = first + n
        self.counters[self.slot] = self.sent

    def stop(self) -> None:
        self.stopping = True
        self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    @property
    def settled(self) -> bool:
        return self.confirmed + self.errored >= self.sent

    # --- the connection's callbacks (PublisherHandler) -------------------------------------

    def _on_confirm(self, ids: tuple[int, ...]) -> None:
        n = len(ids)
        if n == 0:
            return
        runs = [(ids[0], ids[-1])] if ids[-1] - ids[0] + 1 == n else contiguous_runs(ids)
        self._settle(runs, time.time_ns())
        self.confirmed += n
        self.counters[self.slot + 1] = self.confirmed
        self._wakeup()

    def _on_publish_error(self, errors: list[tuple[int, int]]) -> None:
        self._settle(contiguous_runs([i for i, _ in errors]), None)
        self.errored += len(errors)
        self.counters[self.slot + 2] = self.errored
        self._wakeup()

    def _on_closed(self, exc: StreamletError) -> None:
        self.closed = exc
        self._wakeup()

    def _settle(self, runs: list[tuple[int, int]], now: int | None) -> None:
        """Count each frame's settled messages; confirmed ones at their frame's latency."""
        hist = self.hist
        for lo, hi in runs:
            for fr in self.inflight:
                if fr[0] > hi:
                    break
                overlap = min(fr[1], hi) - max(fr[0], lo) + 1
                if overlap <= 0:
                    continue
                fr[3] -= overlap
                if now is not None:
                    us = (now - fr[2]) // 1000
                    stats.record(hist, us, overlap)
                    if us > self.max_us:
                        self.max_us = us
        while self.inflight and self.inflight[0][3] <= 0:
            self.inflight.popleft()
