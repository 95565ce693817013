"""bench's load roles on perf's connection, fed bytes in every split a socket could produce.

Their counts are the benchmark's evidence, so records, chunks and confirms must come out exact
however the frames are cut across reads, and credit must go back in its batches.
"""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from bench.load import CountingConsumer, Publisher, frame_template
from streamlet.client import StreamletError
from streamlet.client.connection import Connection
from streamlet.core.batch import PublishBatch
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.publish import PUBLISH_HEAD_SIZE, deliver_prefix, parse_publish
from streamlet.storage.chunk import encode_chunk, simple_entry
from tests.support.waiting import eventually


class _Transport:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return False


def _conn() -> tuple[Connection, _Transport]:
    conn = Connection(asyncio.get_running_loop())
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def _deliver(sub: int, first: int, bodies: list[bytes], version: int = 1) -> bytes:
    data = b"".join(simple_entry(b) for b in bodies)
    _, chunk = encode_chunk(data, chunk_id=first, num_entries=len(bodies),
                            num_records=len(bodies), timestamp=0)
    return deliver_prefix(sub, len(chunk), 7 if version == 2 else None) + chunk


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
    conn, transport = _conn()
    sink = CountingConsumer(conn, 0, "s", records, credit=10, credit_batch=4)
    pub = Publisher(conn, 3, "s", 400, 8, batch=10, window=400)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 300)) if seed else []
    if seed == 1:  # many tiny reads over the first MiB (chunks of both versions, confirms,
        # a heartbeat), then random cuts: tiny reads all through the 9 MiB prove no more
        cuts = [*range(1, 1 << 20, 13), *sorted(rng.sample(range(1 << 20, len(data)), 300))]
    pos = 0
    for end in [*cuts, len(data)]:
        conn.data_received(data[pos:end])
        pos = end
    assert (sink.records, sink.chunks) == (records, chunks)
    assert sink.done.done() and not sink.errors
    assert pub.confirmed == 400 and pub.done.done()
    # credit went back in batches of 4 chunks
    credits = [f.decode(m[4:]) for m in transport.sent]
    assert sum(c.credit for c in credits if isinstance(c, f.Credit)) == chunks - chunks % 4


async def test_the_publisher_keeps_its_window_and_sends_consecutive_ids() -> None:
    conn, transport = _conn()
    pub = Publisher(conn, 2, "s", 50, 20, batch=10, window=30)
    pub.start()
    assert pub.sent == 30 and len(transport.sent) == 3  # the window is full
    conn.data_received(f.encode(f.PublishConfirm(2, list(range(10)))))
    assert pub.sent == 40
    ids: list[int] = []
    for frame in transport.sent:
        batch = PublishBatch(*parse_publish(memoryview(frame)[8:], 1))
        assert (batch.publisher_id, batch.count) == (2, 10)
        ids.extend(range(batch.first_id, batch.last_id + 1))
    assert ids == list(range(40))


async def test_a_publisher_with_nothing_unconfirmed_sends_again_when_writing_resumes() -> None:
    # two publishers share the connection: the other's bytes hold it paused past our last
    # confirm, so no confirm of ours is left to pump us when the transport takes bytes again
    conn, transport = _conn()
    ours = Publisher(conn, 1, "s", 20, 8, batch=10, window=10)
    ours.start()
    conn.pause_writing()  # the other publisher filled the transport's buffer
    conn.data_received(f.encode(f.PublishConfirm(1, list(range(10)))))
    assert ours.sent == 10  # paused: nothing written
    conn.resume_writing()
    await eventually(lambda: ours.sent == 20)
    assert len(transport.sent) == 2


def test_a_frame_template_holds_its_bodies_after_the_head() -> None:
    frame = frame_template(1, 3, b"abc")
    assert len(frame) == PUBLISH_HEAD_SIZE + 3 * (12 + 3)
    assert PublishBatch(*parse_publish(memoryview(frame)[8:], 1)).data == simple_entry(b"abc") * 3


async def test_a_lost_stream_ends_a_role_and_says_why_but_our_own_close_does_not() -> None:
    conn, _ = _conn()
    gone = CountingConsumer(conn, 0, "s", 10)
    gone._on_closed(StreamletError(Code.STREAM_NOT_AVAILABLE, "stream 's' is not available"))
    closed = Publisher(conn, 1, "s", 10, 8, batch=10)
    closed._on_closed(StreamletError(Code.OK, "closed by the client"))
    assert gone.done.done() and gone.errors == ["STREAM_NOT_AVAILABLE: stream 's' is not available"]
    assert closed.done.done() and closed.errors == []
