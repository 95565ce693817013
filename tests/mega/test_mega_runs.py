"""MEGA's runs (streamlet.mega.runs): the cutters of a run of PRODUCEs or CONSUMEs and the
answer builders give the same results in C and in Python, on random runs and on mutated bytes
(never another error than ValueError where a builder refuses), and end a run where it must (a
table). Then the real MegaConnection in process (a broker that never listens, a fake
transport): a read of many requests is answered request by request, in order, PRODUCE runs
stored as one batch each, CONSUME runs answered in one write across chunks."""

from __future__ import annotations

import random
import struct
from array import array
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import cast

import pytest

from streamlet.broker.mega.connection import MegaConnection
from streamlet.broker.protocols import LISTENERS, load
from streamlet.broker.server import Broker
from streamlet.core.batch import PublishBatch
from streamlet.core.streams import Publisher
from streamlet.mega import MessageType, decode_response, encode_request
from streamlet.mega import runs as r
from streamlet.mega.codec import Response
from tests.sbp.test_sbp_flat import mutated
from tests.support.fakes import FakeTransport

P, C, T = MessageType.PRODUCE, MessageType.CONSUME, MessageType.CREATE_TOPIC
built = pytest.mark.skipif(r._c is None, reason="streamlet.mega._runs is not built here")


def produce(corr: int, topic: str = "t", payload: bytes = b"xy") -> bytes:
    return encode_request(corr, P, topic, 7, payload=payload)


def consume(corr: int, offset: int, topic: str = "t") -> bytes:
    return encode_request(corr, C, topic, 7, offset=offset)


def both(name: str, *args: object) -> object:
    """``runs.<name>(*args)`` in C and in Python: the same result, or both ValueError."""
    fn = getattr(r, name)
    try:
        c = fn(*args)
    except ValueError:
        with pytest.raises(ValueError):
            fn(*args, python=True)
        return ValueError
    assert fn(*args, python=True) == c
    return c


@pytest.mark.parametrize(("first", "rest", "count"), [
    (produce(1), [], 1),
    (produce(1), [produce(2), produce(3)], 3),
    (produce(1), [produce(2, "u"), produce(3)], 1),  # another topic ends the run
    (produce(1), [produce(2, "tt")], 1),  # a longer topic too
    (produce(1), [consume(2, 0), produce(3)], 1),  # another request
    (produce(1), [produce(2), produce(3)[:-1]], 2),  # the last one not whole
    (produce(1), [produce(2, payload=b"x" * 11)], 1),  # past max_payload (10)
    (produce(1), [produce(2, payload=b"x" * 10), produce(3, payload=b"")], 3),
    (consume(1, 0), [], None),  # not a PRODUCE
    (produce(1)[:-1], [], None),  # its layout says more
])
def test_produce_runs_end_where_they_must(first: bytes, rest: list[bytes],
                                         count: int | None) -> None:
    got = both("produce_run", first, b"".join(rest), 10)
    if count is None:
        assert got is None
        return
    fixed = 9 + 1 + 8  # topic "t"
    taken = rest[: count - 1]
    assert got == (sum(map(len, taken)),
                   b"".join(struct.pack(">I", c) for c in range(1, count + 1)),
                   b"".join(f[fixed:] for f in [first, *taken]))


@pytest.mark.parametrize(("first", "rest", "count", "taken"), [
    (consume(1, 5), b"", 1, 0),
    (consume(1, 5), consume(2, 6) + consume(3, 7), 3, 2 * len(consume(2, 6))),
    (consume(1, 5), consume(2, 7), 1, 0),  # not the next offset
    (consume(1, 5), consume(2, 5), 1, 0),  # the same offset again
    (consume(1, 5), consume(2, 6, "u"), 1, 0),
    (consume(1, 5), produce(2), 1, 0),
    (consume(1, 2**32 - 1), consume(2, 0), 1, 0),  # no wrap
    (consume(1, 5), consume(2, 6)[:-1], 1, 0),
    (produce(1), b"", None, None),
])
def test_consume_runs_end_where_they_must(first: bytes, rest: bytes, count: int | None,
                                         taken: int | None) -> None:
    got = both("consume_run", first, rest)
    if count is None:
        assert got is None
        return
    assert got == (taken, b"".join(struct.pack(">I", c) for c in range(1, count + 1)),
                   struct.unpack_from(">I", first, len(first) - 4)[0])


def _random_read(rng: random.Random) -> tuple[bytes, bytes]:
    topics = ["t", "t", "t", "u", "", "long-" * 10]
    first_topic = rng.choice(topics)
    kind = rng.choice((P, C))
    offset = rng.randrange(2**32)
    parts = []
    for i in range(rng.randrange(0, 40)):
        topic = first_topic if rng.random() < 0.9 else rng.choice(topics)
        if kind == P or rng.random() < 0.05:
            parts.append(produce(i, topic, rng.randbytes(rng.choice((0, 1, 20, 300)))))
        else:
            parts.append(consume(i, (offset + i + 1 + (rng.random() < 0.05)) % 2**32, topic))
    first = produce(99, first_topic, rng.randbytes(5)) if kind == P \
        else consume(99, offset, first_topic)
    return first, b"".join(parts)


def test_the_cutters_agree_in_c_and_python_on_random_and_mutated_reads() -> None:
    rng = random.Random(20261129)
    for _ in range(3000):
        first, rest = _random_read(rng)
        if rng.random() < 0.5:
            rest = mutated(rng, rest) if rest else rest
        if rng.random() < 0.2:
            first = mutated(rng, first)
        max_payload = rng.choice((0, 20, 1 << 20))
        got = both("produce_run", first, rest, max_payload)
        if got is not None:
            taken = got[0]  # type: ignore[index]
            assert 0 <= taken <= len(rest)
        both("consume_run", first, rest)


@built
def test_the_c_cutters_are_the_ones_used() -> None:
    assert r._produce_c is r._c.produce_run and r._positions_c is r._c.simple_positions


def _entries(rng: random.Random, n: int) -> bytes:
    return b"".join(struct.pack(">I", k) + rng.randbytes(k)
                    for k in (rng.choice((0, 1, 100, 5000)) for _ in range(n)))


def test_answers_agree_in_c_and_python_and_read_back() -> None:
    rng = random.Random(7)
    for n in (0, 1, 2, 50):
        corrs = struct.pack(f">{n}I", *(rng.randrange(2**32) for _ in range(n)))
        ts, offset = rng.randrange(2**63), rng.randrange(2**63)
        raw = both("produced_answers", corrs, ts, offset)
        assert isinstance(raw, bytes)
        buf = bytearray(raw)
        got = []
        while (resp := decode_response(buf, lambda _: P)) is not None:
            got.append(resp[0])
            del buf[: resp[1]]
        assert [(g.correlation, g.timestamp, g.offset) for g in got] == \
            [(c, ts, offset + i) for i, (c,) in enumerate(struct.iter_unpack(">I", corrs))]
        entries = _entries(rng, n + 3)
        positions = both("simple_positions", entries)
        assert isinstance(positions, bytes)
        for index in (0, 1, 2, 3, 4):
            raw = both("consumed_answers", corrs, ts, entries, positions, index)
            if index > 3:
                assert raw is ValueError  # past the positions
                continue
            assert isinstance(raw, bytes)
            buf = bytearray(raw)
            msgs = []
            while (resp := decode_response(buf, lambda _: C)) is not None:
                msgs.append(resp[0].message)
                del buf[: resp[1]]
            at = array("q", positions)
            assert msgs == [entries[at[index + i] + 4 : at[index + i + 1]] for i in range(n)]


def test_positions_and_answers_refuse_alike_on_mutated_input() -> None:
    rng = random.Random(11)
    for _ in range(2000):
        entries = _entries(rng, rng.randrange(0, 6))
        bad = mutated(rng, entries) if entries else entries
        both("simple_positions", bad)
        positions = array("q", (rng.choice((-1, 0, 4, 100, len(bad), len(bad) + 1))
                                for _ in range(rng.randrange(0, 5)))).tobytes()
        corrs = rng.randbytes(rng.choice((0, 4, 8, 9)))
        both("consumed_answers", corrs, 1, bad, mutated(rng, positions) if positions else b"",
             rng.randrange(-1, 3))
        both("produced_answers", corrs, 1, 2)


def test_a_sub_entry_batch_has_no_simple_positions() -> None:
    batch = struct.pack(">BHII", 0x80, 1, 1, 3) + b"abc"
    assert both("simple_positions", struct.pack(">I", 1) + b"x" + batch) is None
    assert both("simple_positions", b"") == array("q", [0]).tobytes()


# --- the connection, in process ----------------------------------------------------------------


class CountingTransport(FakeTransport):
    writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        super().write(data)

    def writelines(self, buffers: list[bytes | memoryview]) -> None:
        self.writes += 1
        for b in buffers:
            super().write(bytes(b))


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(load(data_dir=tmp_path / "data"), LISTENERS)  # never started: no socket
    yield b
    for vhost in b.vhosts.values():
        vhost.close()


def connect(broker: Broker) -> tuple[MegaConnection, CountingTransport]:
    conn = cast(MegaConnection, LISTENERS["mega"](broker, False))
    transport = CountingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def answers(transport: FakeTransport, kinds: dict[int, MessageType]) -> list[Response]:
    buf, out = bytearray(transport.take()), []
    while (got := decode_response(buf, kinds.__getitem__)) is not None:
        out.append(got[0])
        del buf[: got[1]]
    assert not buf
    return out


def flush(broker: Broker) -> None:
    for stream in broker.vhosts["/"].streams.streams.values():
        stream.flush()


def counted(publish: Callable[[Publisher, PublishBatch], None],
            calls: list[int]) -> Callable[[Publisher, PublishBatch], None]:
    """``publish``, the size of each batch noted in ``calls``."""
    def spy(pub: Publisher, batch: PublishBatch) -> None:
        calls.append(batch.count)
        publish(pub, batch)
    return spy


async def test_a_read_of_many_requests_is_answered_request_by_request(broker: Broker) -> None:
    conn, transport = connect(broker)
    kinds: dict[int, MessageType] = {}
    raw = []
    for corr, (kind, topic) in enumerate([(T, "a"), (T, "b")] + [(P, "a")] * 300
                                         + [(P, "b")] * 5 + [(P, "amq.no"), (P, "nope")]
                                         + [(P, "a")] * 200, start=1):
        kinds[corr] = kind
        raw.append(encode_request(corr, kind, topic, 0, payload=b"m%d" % corr
                                  if kind == P else None))
    stream = broker.vhosts["/"].streams
    calls: list[int] = []
    conn.data_received(b"".join(raw[:2]))
    for name in ("a", "b"):
        s = stream.get(name)
        assert s is not None
        s.publish = counted(s.publish, calls)  # type: ignore[method-assign, assignment]
    conn.data_received(b"".join(raw[2:]))
    assert calls == [300, 5, 200]  # a batch per run
    flush(broker)
    got = answers(transport, kinds)
    assert [(a.correlation, a.ok) for a in got[:2]] == [(1, True), (2, True)]
    assert {a.correlation: a.code for a in got if not a.ok} == {308: 1, 309: 4}
    done = [a for a in got[2:] if a.ok]
    offsets: dict[str, list[int]] = {"a": [], "b": []}
    for a in done:
        assert a.offset is not None
        offsets["b" if a.correlation in range(303, 308) else "a"].append(a.offset)
    assert offsets == {"a": list(range(500)), "b": list(range(5))}
    assert [a.correlation for a in done if a.correlation not in range(303, 308)] == \
        list(range(3, 303)) + list(range(310, 510))  # in request order
    assert not conn.busy()


async def test_a_run_of_consumes_is_answered_across_chunks_in_one_write(broker: Broker) -> None:
    conn, transport = connect(broker)
    conn.data_received(encode_request(1, T, "c", 0))
    kinds = {1: T}
    corr = 1
    for part in range(3):  # three chunks
        for _ in range(40 + part):
            corr += 1
            kinds[corr] = P
            conn.data_received(produce(corr, "c", b"v%d" % (corr - 2)))
        flush(broker)
    assert len(answers(transport, kinds)) == corr
    total = corr - 1
    kinds = {}
    raw = []
    for i in range(total + 3):  # three past the end
        kinds[1000 + i] = C
        raw.append(consume(1000 + i, i, "c"))
    transport.writes = 0
    conn.data_received(b"".join(raw))
    assert transport.writes == 1
    got = answers(transport, kinds)
    assert [a.message for a in got[:total]] == [b"v%d" % i for i in range(total)]
    assert [(a.ok, a.code) for a in got[total:]] == [(False, 6)] * 3
    assert [a.correlation for a in got] == list(range(1000, 1000 + total + 3))


async def test_a_run_that_fails_is_answered_7_each_once(broker: Broker,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    conn, transport = connect(broker)
    conn.data_received(encode_request(1, T, "f", 0))
    stream = broker.vhosts["/"].streams.get("f")
    assert stream is not None

    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(stream, "publish", broken)
    conn.data_received(b"".join(produce(c, "f") for c in (2, 3, 4)))
    flush(broker)
    got = answers(transport, {1: T, 2: P, 3: P, 4: P})
    assert [(a.correlation, a.ok, a.code) for a in got] == \
        [(1, True, 0), (2, False, 7), (3, False, 7), (4, False, 7)]
    assert not conn.busy()
