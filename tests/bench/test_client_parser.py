"""The load generator's receive path, fed bytes in every split a socket could produce.

Its counts are the benchmark's evidence, so the header-only Deliver parser (which skips chunk
payloads inside its buffer) must count exactly however the frames are cut across reads.
"""

from __future__ import annotations

import random
import struct

import pytest

from bench.client import Conn
from bench.load import CountingConsumer, LatencyConsumer
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.publish import deliver_prefix
from streamlet.storage.chunk import encode_chunk, simple_entry


class _Transport:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def get_extra_info(self, name: str) -> None:
        return None


class _Pub:
    def __init__(self) -> None:
        self.confirmed = 0
        self.pumps = 0

    def on_confirm(self, count: int) -> None:
        self.confirmed += count

    def on_error(self, count: int) -> None:
        raise AssertionError("no errors were sent")

    def pump(self) -> None:
        self.pumps += 1


def _deliver(sub: int, first: int, bodies: list[bytes], version: int = 1) -> bytes:
    data = b"".join(simple_entry(b) for b in bodies)
    _, chunk = encode_chunk(data, chunk_id=first, num_entries=len(bodies),
                            num_records=len(bodies), timestamp=0)
    return deliver_prefix(sub, len(chunk), 7 if version == 2 else None) + chunk


def _feed(conn: Conn, stream: bytes, cuts: list[int]) -> None:
    pos = 0
    for end in [*cuts, len(stream)]:
        while pos < end:
            buf = conn.get_buffer(-1)
            n = min(len(buf), end - pos)
            buf[:n] = stream[pos : pos + n]
            conn.buffer_updated(n)
            pos += n


def _stream() -> tuple[bytes, int, int]:
    parts, records, chunks = [], 0, 0
    rng = random.Random(7)
    for i in range(40):
        n = rng.randint(1, 300)
        size = rng.choice([8, 100, 1000, 5000])
        parts.append(_deliver(0, records, [struct.pack(">Q", i) * (size // 8)] * n,
                              version=1 + i % 2))
        records += n
        chunks += 1
        parts.append(f.encode(f.PublishConfirm(3, list(range(i * 10, i * 10 + 10)))))
        if i % 9 == 0:
            parts.append(f.encode(f.Heartbeat()))
    return b"".join(parts), records, chunks


@pytest.mark.parametrize("seed", range(6))
async def test_counts_are_exact_for_any_split(seed: int) -> None:
    data, records, chunks = _stream()
    conn = Conn()
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    sink = CountingConsumer(conn, 0, records, credit=10, credit_batch=4)
    conn.subs[0] = sink
    pub = _Pub()
    conn.publishers[3] = pub  # type: ignore[assignment]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 300)) if seed else []
    if seed == 1:
        cuts = list(range(1, len(data), 13))  # many tiny reads
    _feed(conn, data, cuts)
    assert (sink.records, sink.chunks) == (records, chunks)
    assert sink.done.done()
    assert pub.confirmed == 400 and pub.pumps > 0
    # credit went back in batches of 4 chunks; heartbeats were answered
    sent = conn.transport.sent  # type: ignore[union-attr]
    credits = [f.decode(m[4:]) for m in sent if f.decode(m[4:]).__class__ is f.Credit]
    assert sum(c.credit for c in credits) == chunks - chunks % 4  # type: ignore[union-attr]
    assert sum(1 for m in sent if isinstance(f.decode(m[4:]), f.Heartbeat)) == 5
    assert conn._r == conn._w == 0  # nothing left over


async def test_latency_consumer_reads_whole_chunks_larger_than_the_buffer() -> None:
    conn = Conn()
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    sink = LatencyConsumer(conn, 1, 3000)
    conn.subs[1] = sink
    # one 3 MB chunk: the 1 MB receive buffer must grow to hold it whole
    bodies = [struct.pack(">Q", 1_000 + i) + bytes(992) for i in range(3000)]
    frame = _deliver(1, 0, bodies)
    _feed(conn, frame, list(range(65536, len(frame), 65536)))
    assert sink.records == 3000 and sink.done.done()
    assert len(sink.latencies) == 3000
    assert len(conn._buf) >= len(frame)
