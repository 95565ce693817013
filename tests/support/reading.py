"""Reading a stream back whole, from the log (unit tests) or through a broker (broker tests)."""

from __future__ import annotations

import asyncio

from streamlet.client import connect
from streamlet.storage import StreamLog
from streamlet.storage.chunk import iter_records
from tests.support.brokers import BrokerProcess


def log_records(log: StreamLog) -> list[bytes]:
    """Every record of ``log``, in order, read straight from its segments."""
    out: list[bytes] = []
    ref = log.find_chunk(0)
    while ref is not None:
        got = log.read_chunks(ref)
        for _r, view in got:
            out.extend(bytes(b) for b in iter_records(view[48:]))
        ref = log.next_chunk(got[-1][0])
    return out


async def stream_bodies(b: BrokerProcess, stream: str, n: int, timeout: float = 30) -> list[bytes]:
    """The first ``n`` message bodies of ``stream``, read from its first offset."""
    async with await connect(b.host, b.port) as c:
        consumer = await c.consumer(stream, offset="first")
        got: list[bytes] = []

        async def run() -> None:
            async for m in consumer:
                got.append(m.body)
                if len(got) == n:
                    return
        await asyncio.wait_for(run(), timeout)
        return got
