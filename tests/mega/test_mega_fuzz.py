"""Fuzzing the MEGA listener in process (fast): 100,000 random, mostly well-formed requests, some
mutated, fed alone or many in one read (runs) into the broker's real MegaConnection (the
LISTENERS factory, a broker that never listens, a fake transport). Every PRODUCE answered with
an offset must find its payload at that offset at the end; the broker logs no error and still
serves a clean connection, and so does a broker restarted on the same data (every payload still
at its offset). (The socket fuzz is test_mega.py's test_fuzz_leaves_the_broker_serving.)"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from streamlet.broker.mega.connection import MegaConnection
from streamlet.broker.protocols import LISTENERS, load
from streamlet.broker.server import Broker
from streamlet.mega import FramingLost, MegaSplitter, MessageType, Request, decode_request
from streamlet.mega.codec import Response, decode_response, encode_request
from streamlet.storage.chunk import HEADER_SIZE, iter_records
from tests.rsio.test_rsio_codec import mutate
from tests.rsio.test_rsio_fuzz import flush
from tests.support.fakes import FakeTransport
from tests.support.reopen import close, reopen

FUZZ_FRAMES = 100_000
TOPICS = [b"mf-0"] * 6 + [b"mf-1", b"mf-none", b"amq.x", b"\xff", b"", b"mf-%d" % 2]


def random_request(rng: random.Random, corr: int) -> bytes:
    kind = rng.choice([MessageType.PRODUCE] * 6 + [MessageType.CONSUME] * 3
                      + [MessageType.CREATE_TOPIC])
    payload = rng.randbytes(rng.randrange(0, 48)) if kind == MessageType.PRODUCE else None
    offset = rng.randrange(3000) if kind == MessageType.CONSUME else None
    return encode_request(corr, kind, rng.choice(TOPICS), rng.randrange(2**64), payload=payload,
                          offset=offset)


def what_the_broker_sees(raw: bytes) -> tuple[list[Request], bool]:
    """The requests the broker takes from ``raw`` sent at a request boundary, and whether it
    loses framing on them."""
    out = []
    try:
        for f in MegaSplitter().feed(raw):
            out.append(decode_request(f))
    except FramingLost:
        return out, True
    return out, False


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(load(data_dir=tmp_path / "data"), LISTENERS)  # never started: no socket
    yield b
    for vhost in b.vhosts.values():
        vhost.close()


class Wire:
    def __init__(self, broker: Broker) -> None:
        self.conn = cast(MegaConnection, LISTENERS["mega"](broker, False))
        self.transport = FakeTransport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.buf = bytearray()

    def read(self, kinds: dict[int, MessageType]) -> list[Response]:
        self.buf += self.transport.take()
        out = []
        while (r := decode_response(self.buf, lambda c: kinds.get(c, MessageType.CREATE_TOPIC))) \
                is not None:
            del self.buf[: r[1]]
            out.append(r[0])
        return out


def read_at(broker: Broker, topic: str, offset: int) -> bytes | None:
    """The record at ``offset`` of ``topic``, through the core (what CONSUME answers)."""
    stream = broker.vhosts["/"].streams.get(topic)
    assert stream is not None
    for ref, chunk in stream.fetch(offset, 1):
        if ref.chunk_id <= offset < ref.next_offset:
            records = list(iter_records(chunk[HEADER_SIZE : HEADER_SIZE + ref.data_length]))
            return bytes(records[offset - ref.chunk_id])
    return None


@pytest.mark.slow  # a long fuzz loop: make test runs it, make test-fast does not
async def test_fuzz_in_process(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(20261123)
    produced: dict[tuple[bytes, int], bytes] = {}  # (topic, offset) -> payload answered
    frames = connections = corr = 0
    while frames < FUZZ_FRAMES:
        wire = Wire(broker)
        connections += 1
        kinds: dict[int, MessageType] = {}
        asked: dict[int, Request] = {}
        group: list[bytes] = []  # requests sent in one read: runs of PRODUCEs and CONSUMEs
        size = rng.choice((1, 1, 5, 50))
        for _ in range(rng.randrange(100, 3000)):
            corr += 1
            raw = random_request(rng, corr)
            bad = rng.random() < 0.003
            if bad:
                raw = mutate(rng, raw)
            seen, lost = what_the_broker_sees(raw)
            if any(r.correlation in kinds for r in seen):
                continue  # a mutated id another request has: its answer could not be told apart
            for r in seen:  # what the broker takes: a mutation may still be a request
                kinds[r.correlation], asked[r.correlation] = r.type, r
            group.append(raw)
            frames += 1
            if len(group) >= size or bad or lost:
                wire.conn.data_received(b"".join(group))
                group = []
            if frames % 16 == 0:
                flush(broker)
            if wire.transport.closed or bad or lost:
                break
        if group:
            wire.conn.data_received(b"".join(group))
        flush(broker)
        for resp in wire.read(kinds):
            req = asked.get(resp.correlation)
            if resp.ok and req is not None and req.type == MessageType.PRODUCE:
                assert resp.offset is not None and req.payload is not None
                key = (req.topic, resp.offset)
                assert key not in produced, "an offset given to two messages"
                produced[key] = req.payload
        wire.conn.connection_lost(None)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")], \
        "the broker logged an error (an exception in a handler)"
    assert connections > 20 and len(produced) > 20_000
    for (topic, offset), payload in produced.items():
        assert read_at(broker, topic.decode(), offset) == payload
    wire = Wire(broker)  # and a clean connection is served
    wire.conn.data_received(encode_request(1, MessageType.PRODUCE, b"mf-0", 0, payload=b"ok"))
    flush(broker)
    (resp,) = wire.read({1: MessageType.PRODUCE})
    assert resp.ok and resp.offset is not None
    assert read_at(broker, "mf-0", resp.offset) == b"ok"

    again = reopen(broker, caplog)  # stopped and started on the same data: it serves
    try:
        for (topic, offset), payload in produced.items():
            assert read_at(again, topic.decode(), offset) == payload
        wire = Wire(again)
        wire.conn.data_received(encode_request(1, MessageType.PRODUCE, b"mf-0", 0,
                                               payload=b"restarted"))
        flush(again)
        (resp,) = wire.read({1: MessageType.PRODUCE})
        assert resp.ok and resp.offset is not None
        wire.conn.data_received(encode_request(2, MessageType.CONSUME, b"mf-0", 0,
                                               offset=resp.offset))
        (got,) = wire.read({2: MessageType.CONSUME})
        assert got.ok and got.message == b"restarted"
    finally:
        close(again)
