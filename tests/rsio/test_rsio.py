"""Reactive Streams IO against a real broker process on loopback: every message type sent and its
answer checked (raw frames), elements split into parts both ways, packed elements, demand as
back-pressure and confirmation, goodbye both ways, bad input, and offsets and bytes shared with
the RabbitMQ Stream protocol (rstream) both ways."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rstream import ConsumerOffsetSpecification, OffsetType, RawMessage
from rstream import Producer as RProducer

from streamlet.client import connect
from streamlet.client.rsio import RsioClient, RsioError
from streamlet.rsio import (
    Cancel,
    Goodbye,
    Hello,
    Message,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Position,
    Request,
    Subscribe,
    Subscribed,
    encode,
    iter_frames,
    varint,
)
from tests.broker.test_rstream import consume as rstream_consume
from tests.support.brokers import BrokerProcess, free_port, wait_for_port

pytestmark = pytest.mark.process

SPLIT = 1000
MAX_ELEMENT = 100_000
WINDOW = 8


class RsioBroker(BrokerProcess):
    rsio_port: int

    def start(self) -> RsioBroker:
        super().start()  # the RabbitMQ port opens last (test_listeners): a belt-and-braces wait
        wait_for_port(self.host, self.rsio_port, proc=self.proc)
        return self


def rsio_broker(root: Path, config: str = "") -> RsioBroker:
    port = free_port()
    cfg = root / "rsio.toml"
    cfg.write_text(f"[listeners.rsio]\nport = {port}\nsplit_bytes = {SPLIT}\n"
                   f"max_element_bytes = {MAX_ELEMENT}\nwindow = {WINDOW}\n{config}")
    root.joinpath("data").mkdir(parents=True, exist_ok=True)
    b = RsioBroker(root / "data", config=cfg)
    b.rsio_port = port
    return b


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RsioBroker]:
    b = rsio_broker(tmp_path_factory.mktemp("rsio"))
    b.start()
    yield b
    b.stop()


class Peer:
    """A raw RSIO connection: messages out, messages in (bounded waits)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.buf = bytearray()
        self.pending: list[Message] = []

    @classmethod
    async def open(cls, b: RsioBroker, hello: bool = True) -> Peer:
        p = cls(*await asyncio.open_connection(b.host, b.rsio_port))
        assert await p.recv(1) == [Hello(0, (1,))]  # the broker does not wait for ours
        if hello:
            p.send(Hello(0, (1,)))
        return p

    def send(self, *msgs: Message) -> None:
        self.writer.write(b"".join(encode(m) for m in msgs))

    async def recv(self, n: int, timeout: float = 20) -> list[Message]:
        async with asyncio.timeout(timeout):
            while len(self.pending) < n:
                self.pending += iter_frames(self.buf)
                if len(self.pending) >= n:
                    break
                data = await self.reader.read(1 << 16)
                if not data:
                    raise EOFError(f"closed after {self.pending}")
                self.buf += data
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    async def closed(self, timeout: float = 20) -> list[Message]:
        """Everything until the broker closes the connection."""
        async with asyncio.timeout(timeout):
            while data := await self.reader.read(1 << 16):
                self.buf += data
        out = [*self.pending, *iter_frames(self.buf)]
        self.pending = []
        return out

    def close(self) -> None:
        self.writer.close()


async def append(p: Peer, stream: str, sub: int, bodies: list[bytes]) -> None:
    """An append through raw frames: the whole exchange checked."""
    p.send(Subscribe(f"{stream}?mode=append&create=true", sub, 0))
    assert await p.recv(2) == [Subscribed(sub, 0),
                               Subscribe(f"{stream}?mode=append&create=true", sub, WINDOW)]
    p.send(Subscribed(sub, 0))
    granted, sent = WINDOW, 0
    while sent < len(bodies):
        while sent < min(granted, len(bodies)):
            p.send(OnNext(sub, bodies[sent]))
            sent += 1
        if sent < len(bodies):
            (req,) = await p.recv(1)
            assert isinstance(req, Request) and req.subscriber == sub
            granted += req.demand
    p.send(OnComplete(sub))
    while True:
        (msg,) = await p.recv(1)
        if msg == OnComplete(sub):
            return
        assert isinstance(msg, Request)  # confirms of elements sent before our onComplete


# --- every message type -------------------------------------------------------------------------

async def test_hello_subscribe_request_next_complete(broker: RsioBroker) -> None:
    p = await Peer.open(broker)
    await append(p, "r-basic", 1, [b"m-%d" % i for i in range(20)])
    p.send(Subscribe("r-basic?end=now", 2, 3))
    assert await p.recv(5) == [Subscribed(2, 0), Position(2, 0), OnNext(2, b"m-0"),
                               OnNext(2, b"m-1"), OnNext(2, b"m-2")]
    p.send(Request(2, 100))
    got = await p.recv(18)
    assert got == [*(OnNext(2, b"m-%d" % i) for i in range(3, 20)), OnComplete(2)]
    # the id may be reused once complete; from an offset, without the offsets extension's need
    p.send(Subscribe("r-basic?offset=18", 2, 1))
    assert await p.recv(3) == [Subscribed(2, 0), Position(2, 18), OnNext(2, b"m-18")]
    p.send(Cancel(2), Request(2, 5))  # a request after cancel is a no-op
    p.send(Subscribe("r-basic?offset=last&end=now", 3, 0))
    assert await p.recv(1) == [Subscribed(3, 0)]
    p.send(Goodbye("done"))
    assert await p.closed() == [Goodbye("goodbye")]


async def test_without_the_offsets_extension_no_position(broker: RsioBroker) -> None:
    p = await Peer.open(broker, hello=False)
    p.send(Hello(0, ()))
    await append(p, "r-noext", 1, [b"a", b"b"])
    p.send(Subscribe("r-noext?end=now", 2, 10))
    assert await p.recv(4) == [Subscribed(2, 0), OnNext(2, b"a"), OnNext(2, b"b"), OnComplete(2)]
    p.close()


async def test_on_error_for_what_cannot_be_served(broker: RsioBroker) -> None:
    p = await Peer.open(broker)
    cases = [("r-none", "no stream 'r-none'"), ("r-x?colour=red", "unknown option"),
             ("amq.x", "reserved"), ("%ff", "UTF-8")]
    for i, (publisher, why) in enumerate(cases, 1):
        p.send(Subscribe(publisher, i, 1))
        sub, err = await p.recv(2)
        assert sub == Subscribed(i, 0) and isinstance(err, OnError) and err.subscriber == i
        assert why in err.error
    await append(p, "r-err", 9, [b"x"])
    p.send(Subscribe("r-err", 10, 0), Request(10, 0))  # rule 3.9: demand must be positive
    sub, err = await p.recv(2)
    assert sub == Subscribed(10, 0) and isinstance(err, OnError) and "3.9" in err.error
    p.send(Subscribe("r-err", 11, 0), Subscribe("r-err", 11, 0))  # a live id reused
    sub, err = await p.recv(2)
    assert sub == Subscribed(11, 0) and isinstance(err, OnError) and "in use" in err.error
    p.send(Subscribe("r-err?end=now", 12, 5))  # still serving
    assert await p.recv(4) == [Subscribed(12, 0), Position(12, 0), OnNext(12, b"x"),
                               OnComplete(12)]
    p.close()


async def test_packed_elements_with_element_size(broker: RsioBroker) -> None:
    p = await Peer.open(broker)
    ints = [i.to_bytes(4, "big") for i in range(10)]
    await append(p, "r-packed", 1, ints)
    p.send(Subscribe("r-packed?end=now&element_size=4", 2, 6))
    assert await p.recv(3) == [Subscribed(2, 4), Position(2, 0),
                               OnNextPacked(2, 6, b"".join(ints[:6]))]
    p.send(Request(2, 1))
    assert await p.recv(1) == [OnNext(2, ints[6])]  # one element of demand: no packing
    p.send(Request(2, 10))
    assert await p.recv(2) == [OnNextPacked(2, 3, b"".join(ints[7:])), OnComplete(2)]
    # a message of another size ends the subscription
    await append(p, "r-packed", 3, [b"12345"])
    p.send(Subscribe("r-packed?offset=9&element_size=4", 4, 10))
    got = await p.recv(4)
    assert got[:3] == [Subscribed(4, 4), Position(4, 9), OnNext(4, ints[9])]
    assert isinstance(got[3], OnError) and "not the element_size 4" in got[3].error
    # the client's publisher packs too
    p.send(Subscribe("r-packed2?mode=append&create=true", 5, 0))
    await p.recv(2)
    p.send(Subscribed(5, 2), OnNextPacked(5, 3, b"aabbcc"), OnComplete(5))
    assert (await p.recv(1)) == [OnComplete(5)]
    p.send(Subscribe("r-packed2?end=now", 6, 10))
    assert await p.recv(6) == [Subscribed(6, 0), Position(6, 0), OnNext(6, b"aa"),
                               OnNext(6, b"bb"), OnNext(6, b"cc"), OnComplete(6)]
    p.close()


async def test_elements_split_into_parts_both_ways(broker: RsioBroker) -> None:
    big = bytes(range(256)) * 10  # 2,560 bytes: three parts of at most SPLIT
    p = await Peer.open(broker)
    p.send(Subscribe("r-parts?mode=append&create=true", 1, 0))
    await p.recv(2)
    p.send(Subscribed(1, 0), OnNextPart(1, 7, big[:100]), OnNextPart(1, 7, big[100:2000]),
           OnNextLastPart(1, 7, big[2000:]), OnNext(1, b"small"), OnComplete(1))
    assert await p.recv(1) == [OnComplete(1)]
    p.send(Subscribe("r-parts?end=now", 2, 5))
    assert await p.recv(7) == [
        Subscribed(2, 0), Position(2, 0), OnNextPart(2, 0, big[:SPLIT]),
        OnNextPart(2, 0, big[SPLIT : 2 * SPLIT]), OnNextLastPart(2, 0, big[2 * SPLIT :]),
        OnNext(2, b"small"), OnComplete(2)]  # a split element's id is its offset
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        assert [e.body for e in await c.read("r-parts")] == [big, b"small"]
        assert await c.publish("r-parts", [big * 30], split_bytes=4096) == 1  # 76,800 bytes
        assert (await c.read("r-parts", offset=2))[0].body == big * 30
    p.close()


async def test_demand_is_back_pressure_and_confirmation(broker: RsioBroker) -> None:
    p = await Peer.open(broker)
    p.send(Subscribe("r-demand?mode=append&create=true", 1, 0))
    await p.recv(2)
    p.send(Subscribed(1, 0), *(OnNext(1, b"e-%d" % i) for i in range(WINDOW)))
    given = 0
    while given < WINDOW:  # each element durable gives one element of demand back
        (req,) = await p.recv(1)
        assert isinstance(req, Request)
        given += req.demand
    assert given == WINDOW
    p.send(*(OnNext(1, b"f-%d" % i) for i in range(WINDOW + 1)))  # one more than granted
    while True:
        (msg,) = await p.recv(1)
        if not isinstance(msg, Request):
            break
    assert msg == Cancel(1)
    (err,) = await p.recv(1)
    assert isinstance(err, OnError) and "requested" in err.error
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        got = [e.body for e in await c.read("r-demand")]
    assert got[:WINDOW] == [b"e-%d" % i for i in range(WINDOW)]  # every confirmed one is there
    p.close()


async def test_publish_violations_end_the_append_only(broker: RsioBroker) -> None:
    p = await Peer.open(broker)
    cases: list[tuple[int, list[Message], str]] = [
        (1, [OnNextPacked(1, 2, b"abc")], "onNextPacked"),
        (2, [OnNextPart(2, 1, b"a"), OnNextPart(2, 2, b"b")], "incomplete"),
        (3, [OnNextPart(3, 1, b"a" * 60_000), OnNextPart(3, 1, b"a" * 60_000)], "more than"),
        (4, [OnNextPart(4, 1, b"a"), OnComplete(4)], "inside a split"),
    ]
    for sub, frames, why in cases:
        p.send(Subscribe("r-viol?mode=append&create=true", sub, 0))
        await p.recv(2)
        p.send(Subscribed(sub, 0), *frames)
        cancel, err = await p.recv(2)
        assert cancel == Cancel(sub) and isinstance(err, OnError) and why in err.error
    p.send(Subscribe("r-viol?mode=append", 5, 0))
    await p.recv(2)
    p.send(Subscribed(5, 0), OnError(5, "my source broke"))
    (err,) = await p.recv(1)
    assert err == OnError(5, "the publisher failed: my source broke")
    p.send(Subscribe("r-viol?mode=append", 6, 0))
    await p.recv(2)
    p.send(Cancel(6))  # the client gives the append up: the broker's subscription ends too
    assert await p.recv(1) == [Cancel(6)]
    p.close()


# --- the connection as a whole --------------------------------------------------------------------

@pytest.mark.parametrize(("first", "why"), [
    (encode(Hello(1, ())), "version 1"),
    (encode(Subscribe("x", 1, 1)), "must be hello"),
    (b"\x01\x63", "unknown message type 99"),
    (varint(MAX_ELEMENT + 1000) + b"\x07\x01", "exceeds the limit"),
    (b"\xff" * 11, "not a varint"),
])
async def test_bad_input_is_answered_with_goodbye_then_closed(broker: RsioBroker, first: bytes,
                                                              why: str) -> None:
    bystander = await Peer.open(broker)
    bystander.send(Subscribe("r-bystander?mode=append&create=true", 1, 0))
    await bystander.recv(2)
    p = await Peer.open(broker, hello=first.startswith(b"\x01\x63"))
    p.writer.write(first)
    (bye,) = await p.closed()
    assert isinstance(bye, Goodbye) and why in bye.reason
    bystander.send(Subscribed(1, 0), OnNext(1, b"fine"), OnComplete(1))
    assert await bystander.recv(1) == [OnComplete(1)]
    bystander.close()


async def test_malformed_frame_after_hello_and_broker_initiated_goodbye(broker: RsioBroker) -> None:
    p = await Peer.open(broker)
    p.writer.write(b"\x03\x05\x01\x00")  # a cancel with a byte too many: framing is kept
    (bye,) = await p.closed()
    assert isinstance(bye, Goodbye) and "past the message's last field" in bye.reason


async def test_the_broker_says_goodbye_when_it_stops(tmp_path: Path) -> None:
    b = rsio_broker(tmp_path)
    b.start()
    try:
        p = await Peer.open(b)
        p.send(Subscribe("r-stop?mode=append&create=true", 1, 0))
        await p.recv(2)
        b.proc.terminate()  # type: ignore[union-attr]
        got = await p.closed()
        assert got and isinstance(got[-1], Goodbye)
    finally:
        b.stop()


async def test_a_stream_deleted_ends_its_subscriptions(broker: RsioBroker) -> None:
    p = await Peer.open(broker)
    await append(p, "r-deleted", 1, [b"one"])
    p.send(Subscribe("r-deleted", 2, 10), Subscribe("r-deleted?mode=append", 3, 0))
    assert await p.recv(5) == [Subscribed(2, 0), Position(2, 0), OnNext(2, b"one"),
                               Subscribed(3, 0), Subscribe("r-deleted?mode=append", 3, WINDOW)]
    async with RProducer(broker.host, broker.port, username="guest", password="guest") as rp:
        await rp.delete_stream("r-deleted")
    got = await p.recv(3)
    assert OnError(2, "stream 'r-deleted' was deleted") in got
    assert Cancel(3) in got and OnError(3, "stream 'r-deleted' was deleted") in got
    p.close()


# --- one log, two protocols -------------------------------------------------------------------

async def test_rstream_to_rsio_same_offsets_and_bytes(broker: RsioBroker) -> None:
    async with RProducer(broker.host, broker.port, username="guest", password="guest") as rp:
        await rp.create_stream("r-from-rstream")
        await rp.send_batch("r-from-rstream", [RawMessage(b"rs-%d" % i) for i in range(300)])
        await rp.send_sub_entry("r-from-rstream", [RawMessage(b"sub-%d" % i) for i in range(5)])
    want = await rstream_consume(broker, "r-from-rstream",
                                 ConsumerOffsetSpecification(OffsetType.FIRST), 305)
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        got = await c.read("r-from-rstream", demand=50)
        assert [(e.offset, e.body) for e in got] == want
        part = await c.read("r-from-rstream", offset=298, end=302)
        assert [(e.offset, e.body) for e in part] == want[298:302]


async def test_the_client_reads_many_elements_in_order(broker: RsioBroker) -> None:
    """The client's reading path (onNext cut out without a decode, elements handed over a read
    at a time) against small demand, gaps in the offsets and packed elements."""
    async with RProducer(broker.host, broker.port, username="guest", password="guest") as rp:
        await rp.create_stream("r-many")
        await rp.send_batch("r-many", [RawMessage(b"%04d" % i) for i in range(3000)])
        await rp.send_sub_entry("r-many", [RawMessage(b"s%03d" % i) for i in range(5)])
    want = await rstream_consume(broker, "r-many", ConsumerOffsetSpecification(OffsetType.FIRST),
                                 3005)
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        for demand in (1, 7, 512):
            got = await c.read("r-many", demand=demand, offset=2990 if demand == 1 else "first")
            assert [(e.offset, e.body) for e in got] == (want[2990:] if demand == 1 else want)
        packed = await c.read("r-many", element_size=4, demand=100)  # onNextPacked runs
        assert [(e.offset, e.body) for e in packed] == want


async def test_rsio_to_rstream(broker: RsioBroker) -> None:
    bodies = [b"rsio-%04d" % i for i in range(1000)]
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        assert await c.publish("r-to-rstream", bodies, create=True) == 1000
    got = await rstream_consume(broker, "r-to-rstream",
                                ConsumerOffsetSpecification(OffsetType.FIRST), 1000)
    assert got == list(enumerate(bodies))


async def test_a_follower_of_the_stream_gets_what_is_published(broker: RsioBroker) -> None:
    """A subscription without end follows the stream: onNext for messages published later."""
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        await c.publish("r-follow", [b"before"], create=True)
        sub = await c.subscribe("r-follow", offset="next")
        it = aiter(sub)
        async with RProducer(broker.host, broker.port, username="guest", password="guest") as rp:
            await rp.send_batch("r-follow", [RawMessage(b"after")])
        element = await asyncio.wait_for(anext(it), 20)
        assert (element.offset, element.body) == (1, b"after")
        with pytest.raises(RsioError, match="no stream"):
            await c.read("r-none")


async def test_a_super_stream_partition_through_rsio(broker: RsioBroker) -> None:
    async with await connect(broker.host, broker.port) as admin:
        await admin.create_super_stream("r-super", ["r-super-0", "r-super-1"], ["0", "1"])
        assert await admin.route("1", "r-super") == ["r-super-1"]
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        assert await c.publish("r-super-1", [b"p1-a", b"p1-b"]) == 2
        got = await rstream_consume(broker, "r-super-1",
                                    ConsumerOffsetSpecification(OffsetType.FIRST), 2)
        assert got == [(0, b"p1-a"), (1, b"p1-b")]
        assert [(e.offset, e.body) for e in await c.read("r-super-1")] == got


# --- configuration ------------------------------------------------------------------------------

def test_rsio_is_loopback_only_and_has_its_flag(tmp_path: Path) -> None:
    cfg = tmp_path / "open.toml"
    cfg.write_text('[listeners.rsio]\nport = 5999\nhost = "0.0.0.0"\n')
    out = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--config", str(cfg),
                          "--data-dir", str(tmp_path / "d")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "loopback" in out.stderr and "RSIO" in out.stderr
    help_text = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    assert "--rsio-port" in help_text


def test_rsio_port_flag_and_cli_protocols(broker_factory: Callable[..., BrokerProcess]) -> None:
    rsio, mega = free_port(), free_port()
    b = broker_factory(extra_args=["--rsio-port", str(rsio), "--mega-port", str(mega)])
    wait_for_port(b.host, rsio, proc=b.proc)
    cli = [sys.executable, "-m", "streamlet"]
    for protocol, port in (("rsio", rsio), ("mega", mega)):
        stream = f"r-cli-{protocol}"
        out = subprocess.run([*cli, "produce", stream, "--create", "--protocol", protocol,
                              "--port", str(port)], input=b"one\ntwo\n", capture_output=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        for reader, rport in (("rabbitmq", b.port), ("rsio", rsio), ("mega", mega)):
            got = subprocess.run([*cli, "consume", stream, "--protocol", reader, "--port",
                                  str(rport), "--count", "2", "--timeout", "20"],
                                 capture_output=True, timeout=60)
            assert got.stdout == b"0\tone\n1\ttwo\n", (protocol, reader, got.stderr)
