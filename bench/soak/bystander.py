"""A well-behaved client beside the abuse: publishes numbered messages on its own stream and
consumes them from the first, the whole time. Any error, any close, any message missing,
repeated or out of order is a failure of the phase it stands beside."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from streamlet.client import Client, Consumer, Producer, connect

BATCH = 50          # messages per send_many
PERIOD_S = 0.05     # between batches: about 1,000 msg/s, enough to see a stall, bounded


@dataclass
class BystanderReport:
    published: int = 0
    confirmed: int = 0
    consumed: int = 0
    slowest_flush_s: float = 0.0
    errors: list[str] = field(default_factory=list)


class Bystander:
    _made = 0

    def __init__(self, port: int, name: str) -> None:
        # A stream of its own each time (a phase may run twice on one broker): it reads from
        # the first offset and expects only its own messages.
        Bystander._made += 1
        self.port, self.stream = port, f"{name}-{Bystander._made}-{time.time_ns()}"
        self.report = BystanderReport()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._client: Client | None = None
        self._consumer: Consumer | None = None

    async def start(self) -> None:
        # A long heartbeat: a loaded 2-core machine must not make a live peer look dead.
        self._client = await connect("127.0.0.1", self.port, heartbeat=60, timeout=60)
        await self._client.create_stream(self.stream, exists_ok=True)
        producer = await self._client.producer(self.stream)
        self._consumer = await self._client.consumer(self.stream, offset="first")
        self._tasks = [asyncio.create_task(self._publish(producer)),
                       asyncio.create_task(self._consume(self._consumer))]

    async def _publish(self, producer: Producer) -> None:
        r = self.report
        try:
            while not self._stop.is_set():
                n = r.published
                await producer.send_many(b"bystander-%010d" % i for i in range(n, n + BATCH))
                r.published += BATCH
                t0 = time.monotonic()
                await producer.flush()
                r.slowest_flush_s = max(r.slowest_flush_s, time.monotonic() - t0)
                r.confirmed = producer.confirmed_count
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), PERIOD_S)
            await producer.close()
        except Exception as e:  # noqa: BLE001 - whatever it is, it is the failure to report
            r.errors.append(f"publisher: {type(e).__name__}: {e}")

    async def _consume(self, consumer: Consumer) -> None:
        r = self.report
        try:
            async for msg in consumer:
                expected = b"bystander-%010d" % r.consumed
                if msg.offset != r.consumed or msg.body != expected:
                    r.errors.append(f"consumer: at offset {msg.offset} got {msg.body[:40]!r}, "
                                    f"expected offset {r.consumed} {expected!r} (lost or repeated)")
                    return
                r.consumed += 1
        except Exception as e:  # noqa: BLE001
            if not self._stop.is_set() or r.consumed < r.confirmed:
                r.errors.append(f"consumer: {type(e).__name__}: {e}")

    async def stop(self, catch_up_s: float = 60.0) -> BystanderReport:
        """Stop publishing, wait for the consumer to have read every confirmed message."""
        r = self.report
        self._stop.set()
        await asyncio.wait_for(self._tasks[0], 120)
        deadline = time.monotonic() + catch_up_s
        while r.consumed < r.confirmed and not r.errors and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if r.consumed != r.confirmed and not r.errors:
            r.errors.append(f"consumer read {r.consumed} of {r.confirmed} confirmed messages "
                            f"within {catch_up_s:.0f} s")
        if r.confirmed != r.published and not r.errors:
            r.errors.append(f"{r.published} published but {r.confirmed} confirmed")
        assert self._consumer is not None and self._client is not None
        try:
            await self._consumer.close()
            await self._client.close()
        except Exception as e:  # noqa: BLE001
            r.errors.append(f"closing: {type(e).__name__}: {e}")
        for t in self._tasks:
            t.cancel()
        return r

    def failed(self) -> bool:
        return bool(self.report.errors) or any(
            t.done() and not t.cancelled() and t.exception() is not None for t in self._tasks)
