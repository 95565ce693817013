"""MEGA against a real broker process on loopback: every message type and every reachable error
code, offsets shared with the RabbitMQ Stream protocol (rstream), requests cut into single
bytes, concurrent producers, and a fuzz run that leaves the broker serving."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rstream import ConsumerOffsetSpecification, OffsetType, RawMessage
from rstream import Producer as RProducer

from streamlet.client.mega import MegaClient, MegaError
from streamlet.mega import ErrorCode, MessageType, encode_request
from streamlet.mega.codec import Response, decode_response
from tests.broker.test_rstream import consume as rstream_consume
from tests.support.brokers import BrokerProcess, free_port, wait_for_port

pytestmark = pytest.mark.process

MAX_PAYLOAD = 4096


class MegaBroker(BrokerProcess):
    mega_port: int

    def start(self) -> MegaBroker:
        super().start()  # the RabbitMQ port opens last (test_listeners): a belt-and-braces wait
        wait_for_port(self.host, self.mega_port, proc=self.proc)
        return self


def _mega_broker(root: Path, config: str = "", **kwargs: object) -> MegaBroker:
    port = free_port()
    cfg = root / "mega.toml"
    cfg.write_text(f"[listeners.mega]\nport = {port}\nmax_payload_bytes = {MAX_PAYLOAD}\n{config}")
    root.joinpath("data").mkdir(parents=True, exist_ok=True)
    b = MegaBroker(root / "data", config=cfg, **kwargs)  # type: ignore[arg-type]
    b.mega_port = port
    return b


@pytest.fixture(scope="module")
def mega_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MegaBroker]:
    b = _mega_broker(tmp_path_factory.mktemp("mega"))
    b.start()
    yield b
    b.stop()


async def client(b: MegaBroker) -> MegaClient:
    return await MegaClient.connect(b.host, b.mega_port)


async def expect(code: ErrorCode, work: object) -> None:
    with pytest.raises(MegaError) as e:
        await work  # type: ignore[misc]
    assert e.value.code == code


def raw_exchange(b: MegaBroker, data: bytes, kinds: dict[int, MessageType], *,
                 one_byte_at_a_time: bool = False, want: int | None = None) -> tuple[list, bool]:
    """Send ``data``; return the responses read (decoded by ``kinds``) and whether the broker
    closed the connection."""
    got: list = []
    buf = bytearray()
    with socket.create_connection((b.host, b.mega_port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if one_byte_at_a_time:
            for i in range(len(data)):
                s.sendall(data[i : i + 1])
                time.sleep(0.001)
        else:
            s.sendall(data)
        closed = False
        while want is None or len(got) < want:
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            buf += chunk
            while (r := decode_response(buf, kinds.get)) is not None:
                got.append(r[0])
                del buf[: r[1]]
    return got, closed


async def test_create_produce_consume(mega_broker: MegaBroker) -> None:
    async with await client(mega_broker) as c:
        before = int(time.time() * 1000)
        await c.create_topic("m-basic")
        offsets = [await c.produce("m-basic", b"body-%d" % i) for i in range(5)]
        assert offsets == [0, 1, 2, 3, 4]
        assert offsets[4] == await c.produce("m-basic", b"") - 1  # an empty message is one
        for i, off in enumerate(offsets):
            ts, body = await c.consume("m-basic", off)
            assert body == b"body-%d" % i
            assert before - 1000 <= ts <= int(time.time() * 1000) + 1000
        assert (await c.consume("m-basic", 5))[1] == b""


async def test_produce_many_and_consume_many(mega_broker: MegaBroker) -> None:
    """The client's pipelined calls: one write per batch, answers in the batch's order."""
    bodies = [b"many-%d" % i for i in range(2000)]
    async with await client(mega_broker) as c:
        await c.create_topic("m-many")
        offsets = await c.produce_many("m-many", bodies[:1000])
        offsets += await c.produce_many("m-many", bodies[1000:])
        assert offsets == list(range(2000))
        got = await c.consume_many("m-many", reversed(range(2000)))
        assert [body for _, body in got] == bodies[::-1]
        await expect(ErrorCode.INVALID_OFFSET, c.consume_many("m-many", [0, 2000, 1]))
        await expect(ErrorCode.TOPIC_NOT_FOUND, c.produce_many("m-many-none", [b"x"]))
        assert await c.produce_many("m-many", []) == []
        assert await c.produce("m-many", b"after") == 2000  # the connection still serves


async def test_error_codes(mega_broker: MegaBroker) -> None:
    async with await client(mega_broker) as c:
        await c.create_topic("m-errors")
        await expect(ErrorCode.TOPIC_ALREADY_EXISTS, c.create_topic("m-errors"))
        await expect(ErrorCode.TOPIC_NOT_FOUND, c.produce("m-none", b"x"))
        await expect(ErrorCode.TOPIC_NOT_FOUND, c.consume("m-none", 0))
        await expect(ErrorCode.INVALID_OFFSET, c.consume("m-errors", 0))  # nothing stored yet
        assert await c.produce("m-errors", b"x") == 0
        await expect(ErrorCode.INVALID_OFFSET, c.consume("m-errors", 1))
        await expect(ErrorCode.INVALID_OFFSET, c.consume("m-errors", 2**32 - 1))
        for bad in ["", "amq.reserved", "a\nb"]:
            await expect(ErrorCode.INVALID_REQUEST, c.create_topic(bad))
            await expect(ErrorCode.INVALID_REQUEST, c.produce(bad, b"x"))
        await expect(ErrorCode.INVALID_REQUEST, c.request(MessageType.CONSUME, b"\xff\xfe", offset=0))
        # the connection still serves after every one of these
        assert (await c.consume("m-errors", 0))[1] == b"x"


def test_unknown_type_is_answered_then_closed(mega_broker: MegaBroker) -> None:
    data = encode_request(1, MessageType.CREATE_TOPIC, "m-type", 0) + encode_request(2, 0x7F, "x", 0)
    got, closed = raw_exchange(mega_broker, data, {1: MessageType.CREATE_TOPIC})
    assert [(r.correlation, r.ok, r.code) for r in got] == [
        (1, True, 0), (2, False, ErrorCode.INVALID_MESSAGE_TYPE)]
    assert closed


@pytest.mark.parametrize("request_", [
    encode_request(3, MessageType.PRODUCE, "m-big", 0, payload=b"x" * (MAX_PAYLOAD + 1)),
    encode_request(3, MessageType.CONSUME, "m" * 256, 0, offset=0),
])
def test_too_large_is_answered_then_closed(mega_broker: MegaBroker, request_: bytes) -> None:
    got, closed = raw_exchange(mega_broker, request_, {})
    assert [(r.correlation, r.ok, r.code) for r in got] == [(3, False, ErrorCode.MESSAGE_TOO_LARGE)]
    assert closed


def test_the_largest_payload_is_taken(mega_broker: MegaBroker) -> None:
    data = (encode_request(1, MessageType.CREATE_TOPIC, "m-max", 0)
            + encode_request(2, MessageType.PRODUCE, "m-max", 0, payload=b"y" * MAX_PAYLOAD)
            + encode_request(3, MessageType.CONSUME, "m-max", 0, offset=0))
    kinds = {1: MessageType.CREATE_TOPIC, 2: MessageType.PRODUCE, 3: MessageType.CONSUME}
    got, _ = raw_exchange(mega_broker, data, kinds, want=3)
    assert {r.correlation for r in got} == {1, 2, 3}  # the consume may come before the confirm
    assert next(r for r in got if r.correlation == 2).offset == 0
    got, _ = raw_exchange(mega_broker, encode_request(3, MessageType.CONSUME, "m-max", 0, offset=0),
                          kinds, want=1)
    assert got[0].message == b"y" * MAX_PAYLOAD


def test_requests_one_byte_at_a_time(mega_broker: MegaBroker) -> None:
    data = (encode_request(1, MessageType.CREATE_TOPIC, "m-bytes", 0)
            + encode_request(2, MessageType.PRODUCE, "m-bytes", 0, payload=b"split into bytes"))
    kinds = {1: MessageType.CREATE_TOPIC, 2: MessageType.PRODUCE, 3: MessageType.CONSUME}
    got, _ = raw_exchange(mega_broker, data, kinds, one_byte_at_a_time=True, want=2)
    assert [(r.correlation, r.ok, r.offset) for r in got] == [(1, True, None), (2, True, 0)]
    got, _ = raw_exchange(mega_broker, encode_request(3, MessageType.CONSUME, "m-bytes", 0,
                                                      offset=0), kinds, one_byte_at_a_time=True,
                          want=1)
    assert got[0].message == b"split into bytes"


def test_resource_exhausted_at_max_streams(tmp_path: Path) -> None:
    b = _mega_broker(tmp_path, "[limits]\nmax_streams = 1\n")
    b.start()
    try:
        async def run() -> None:
            async with await client(b) as c:
                await c.create_topic("m-one")
                await expect(ErrorCode.RESOURCE_EXHAUSTED, c.create_topic("m-two"))
        asyncio.run(run())
    finally:
        b.stop()


def test_mega_is_off_unless_configured_and_loopback_only(tmp_path: Path) -> None:
    import subprocess
    import sys
    cfg = tmp_path / "open.toml"
    cfg.write_text('[listeners.mega]\nport = 5999\nhost = "0.0.0.0"\n')
    out = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--config", str(cfg),
                          "--data-dir", str(tmp_path / "d")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "loopback" in out.stderr
    help_text = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    assert "--mega-port" in help_text


def test_mega_port_flag(broker_factory: Callable[..., BrokerProcess]) -> None:
    port = free_port()
    b = broker_factory(extra_args=["--mega-port", str(port)])
    wait_for_port(b.host, port, proc=b.proc)

    async def run() -> None:
        async with await MegaClient.connect(b.host, port) as c:
            await c.create_topic("m-flag")
            assert await c.produce("m-flag", b"x") == 0
    asyncio.run(run())


async def test_mega_to_rstream(mega_broker: MegaBroker) -> None:
    bodies = [b"mega-%03d" % i for i in range(300)]
    async with await client(mega_broker) as c:
        await c.create_topic("m-to-rstream")
        offsets = await asyncio.gather(*[c.produce("m-to-rstream", x) for x in bodies])
    assert sorted(offsets) == list(range(300))
    got = await rstream_consume(mega_broker, "m-to-rstream",
                                ConsumerOffsetSpecification(OffsetType.FIRST), 300)
    assert dict(got) == dict(zip(offsets, bodies, strict=True))


async def test_rstream_to_mega(mega_broker: MegaBroker) -> None:
    async with RProducer(mega_broker.host, mega_broker.port, username="guest",
                         password="guest") as p:
        await p.create_stream("m-from-rstream")
        await p.send_batch("m-from-rstream", [RawMessage(b"rs-%d" % i) for i in range(200)])
        # a sub-entry batch: its records each have their offset
        await p.send_sub_entry("m-from-rstream", [RawMessage(b"sub-%d" % i) for i in range(5)])
    async with await client(mega_broker) as c:
        async def body(off: int) -> bytes:
            for _ in range(100):
                try:
                    return (await c.consume("m-from-rstream", off))[1]
                except MegaError as e:
                    assert e.code == ErrorCode.INVALID_OFFSET  # not committed yet
                    await asyncio.sleep(0.05)
            raise AssertionError(f"offset {off} never readable")
        got = [await body(i) for i in range(205)]
    assert got[:200] == [b"rs-%d" % i for i in range(200)]
    assert got[200:] == [b"sub-%d" % i for i in range(5)]


async def test_concurrent_producers_get_the_offsets_of_their_messages(mega_broker: MegaBroker) -> None:
    """Two MEGA connections and an rstream producer publish at once: their messages coalesce
    into the same chunks, and each MEGA answer names the offset its own message got."""
    stream, n = "m-concurrent", 500
    async with await client(mega_broker) as a, await client(mega_broker) as b:
        await a.create_topic(stream)

        async def mega(c: MegaClient, tag: bytes) -> list[tuple[int, bytes]]:
            out = []
            for i in range(0, n, 50):
                bodies = [tag + b"-%d" % j for j in range(i, i + 50)]
                offs = await asyncio.gather(*[c.produce(stream, x) for x in bodies])
                out += list(zip(offs, bodies, strict=True))
            return out

        async def rstream() -> None:
            async with RProducer(mega_broker.host, mega_broker.port, username="guest",
                                 password="guest") as p:
                for i in range(0, n, 50):
                    await p.send_batch(stream, [RawMessage(b"r-%d" % j) for j in range(i, i + 50)])

        ga, gb, _ = await asyncio.gather(mega(a, b"a"), mega(b, b"b"), rstream())
    mine = dict(ga + gb)
    assert len(mine) == 2 * n  # no offset given twice
    stored = dict(await rstream_consume(mega_broker, stream,
                                        ConsumerOffsetSpecification(OffsetType.FIRST), 3 * n))
    assert len(stored) == 3 * n
    assert {off: stored[off] for off in mine} == mine


FUZZ_FRAMES = 100_000


def _frame(rng: random.Random, corr: int) -> tuple[bytes, MessageType, bytes | None, bool]:
    """A well-formed request with random content: (bytes, type, payload if a produce to the
    fuzz topic, True if it may be a success)."""
    kind = rng.choice([MessageType.PRODUCE] * 5 + [MessageType.CONSUME] * 4
                      + [MessageType.CREATE_TOPIC])
    topic = rng.choice([b"m-fuzz"] * 8 + [b"m-fuzz-none", b"amq.x", b"\xff", b"",
                                          b"m-fuzz-%d" % rng.randrange(5)])
    payload = rng.randbytes(rng.randrange(0, 64)) if kind == MessageType.PRODUCE else None
    offset = (rng.randrange(2000) if rng.random() < 0.9 else rng.randrange(2**32)) \
        if kind == MessageType.CONSUME else None
    raw = encode_request(corr, kind, topic, rng.randrange(2**64), payload=payload, offset=offset)
    return raw, kind, payload if topic == b"m-fuzz" else None, True


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    b = bytearray(raw)
    how = rng.randrange(4)
    if how == 0:
        b[rng.randrange(len(b))] = rng.randrange(256)
    elif how == 1:
        del b[rng.randrange(len(b)):]
    elif how == 2:
        b[rng.randrange(len(b)):rng.randrange(len(b))] = rng.randbytes(rng.randrange(1, 20))
    else:
        return rng.randbytes(rng.randrange(1, 64))
    return bytes(b)


async def _fuzz_connection(b: MegaBroker, rng: random.Random, frames: int, mutate: bool
                           ) -> tuple[dict[int, bytes], set[int]]:
    """(offset -> payload of each produce answered with success on a clean connection, the
    offsets answered on a mutated one)."""
    kinds: dict[int, MessageType] = {}
    payloads: dict[int, bytes | None] = {}
    parts = []
    for corr in range(1, frames + 1):
        raw, kind, payload, _ = _frame(rng, corr)
        kinds[corr], payloads[corr] = kind, payload
        parts.append(_mutate(rng, raw) if mutate and rng.random() < 0.01 else raw)
    reader, writer = await asyncio.open_connection(b.host, b.mega_port)
    writer.write(b"".join(parts))
    if mutate:  # whatever request is pending ends, then a type 0 loses framing: a close
        writer.write(bytes(9 + 255 + 8 + 4 + MAX_PAYLOAD + 16))
    buf = bytearray()
    answered: dict[int, Response] = {}
    try:
        while len(answered) < frames:
            data = await reader.read(1 << 16)
            if not data:
                break
            buf += data
            while (r := decode_response(buf, lambda c: kinds.get(c, MessageType.CREATE_TOPIC))) \
                    is not None:
                del buf[: r[1]]
                answered[r[0].correlation] = r[0]
    finally:
        writer.close()
    if not mutate:
        assert len(answered) == frames, "a clean connection answers every request"
    produced: dict[int, bytes] = {}
    offsets: set[int] = set()
    for corr, resp in answered.items():
        if resp.ok and kinds.get(corr) == MessageType.PRODUCE:
            off = resp.offset
            if off is None:
                continue
            offsets.add(off)
            p = payloads.get(corr)
            if not mutate and p is not None:
                produced[off] = p
    return produced, offsets


async def test_fuzz_leaves_the_broker_serving(mega_broker: MegaBroker) -> None:
    rng = random.Random(20261123)
    async with await client(mega_broker) as c:
        await c.create_topic("m-fuzz")
    per_conn, conns = 2500, FUZZ_FRAMES // 2500
    results = await asyncio.wait_for(asyncio.gather(*[
        _fuzz_connection(mega_broker, random.Random(rng.random()), per_conn, mutate=i % 2 == 1)
        for i in range(conns)]), 240)
    # garbage connections too: random bytes only
    for _ in range(20):
        with socket.create_connection((mega_broker.host, mega_broker.mega_port), timeout=10) as s:
            s.sendall(rng.randbytes(rng.randrange(1, 300)) + bytes(5000))
    assert mega_broker.alive()
    exact: dict[int, bytes] = {}
    any_offsets: set[int] = set()
    for produced, offsets in results:
        assert not set(produced) & set(exact), "an offset given to two messages"
        exact.update(produced)
        any_offsets |= offsets
    assert len(exact) > 10_000
    async with await client(mega_broker) as c:  # another connection is served, and reads all
        await c.create_topic("m-after-fuzz")
        assert await c.produce("m-after-fuzz", b"still here") == 0
        for off in sorted(any_offsets):
            _, body = await c.consume("m-fuzz", off)
            if off in exact:
                assert body == exact[off]


async def test_a_topic_deleted_through_rabbitmq_and_created_again(mega_broker: MegaBroker) -> None:
    async with await client(mega_broker) as c:
        await c.create_topic("m-deleted")
        assert await c.produce("m-deleted", b"one") == 0
        async with RProducer(mega_broker.host, mega_broker.port, username="guest",
                             password="guest") as p:
            await p.delete_stream("m-deleted")
        await expect(ErrorCode.TOPIC_NOT_FOUND, c.produce("m-deleted", b"two"))
        await expect(ErrorCode.TOPIC_NOT_FOUND, c.consume("m-deleted", 0))
        await c.create_topic("m-deleted")
        assert await c.produce("m-deleted", b"three") == 0  # a new stream: offsets start over
        assert (await c.consume("m-deleted", 0))[1] == b"three"
