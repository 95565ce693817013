"""Fuzzing the Reactive Streams IO listener.

In process (fast): 100,000 random, mostly well-formed frames, some mutated, fed into the
broker's real RsioConnection; every element the broker confirmed must be in the stream at the
end, also after a restart on the same data, and the broker must have raised nothing.
Over sockets (short): a real broker process takes random and mutated frames on several
connections while a well-behaved client publishes; the broker keeps serving and everything the
client was confirmed is readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from streamlet.broker.protocols import LISTENERS, load
from streamlet.broker.rsio.connection import RsioConnection
from streamlet.broker.server import Broker
from streamlet.client.rsio import RsioClient
from streamlet.rsio import (
    Cancel,
    FramingLost,
    Goodbye,
    Hello,
    Malformed,
    Message,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Position,
    Request,
    RsioSplitter,
    Subscribe,
    Subscribed,
    decode,
    encode,
)
from streamlet.storage.chunk import HEADER_SIZE, iter_records
from tests.rsio.test_rsio import rsio_broker
from tests.rsio.test_rsio_codec import mutate
from tests.support.fakes import FakeTransport
from tests.support.reopen import close, reopen

FUZZ_FRAMES = 100_000
PUBLISHERS = ["fz-0?mode=append&create=true"] * 3 + ["fz-0?mode=append&create=true", "fz-1?mode=append&create=true", "fz-1?mode=append",
              "fz-0", "fz-0?end=now", "fz-1?offset=last&element_size=8", "fz-0?offset=5&end=20",
              "fz-none", "fz-0?colour=red", "%ff", "fz-1?offset=next"]


@dataclass
class Append:
    """What the model knows of one of the broker's subscriptions to our publisher."""

    accepted: list[bytes] = field(default_factory=list)
    element_size: int = 0
    part: list[bytes] | None = None
    part_id: int = -1
    confirmed: int = 0


@dataclass
class Model:
    appends: dict[int, Append] = field(default_factory=dict)
    durable: set[bytes] = field(default_factory=set)
    counter: int = 0

    def body(self, size: int = 0) -> bytes:
        self.counter += 1
        return b"%08d" % self.counter if size else b"fz%d" % self.counter

    def sent(self, msg: Message) -> None:
        """Our message as the broker takes it (a violation ends the append: its own signals,
        read back, say so, and what it accepted before stays valid)."""
        a = self.appends.get(getattr(msg, "subscriber", -1))
        if a is None:
            return
        if isinstance(msg, Subscribed):
            a.element_size = msg.element_size
        elif isinstance(msg, OnNext):
            a.accepted.append(msg.element)
        elif isinstance(msg, OnNextPacked):
            size = a.element_size
            if size and msg.count and msg.count * size == len(msg.data):
                a.accepted += [msg.data[i : i + size] for i in range(0, len(msg.data), size)]
        elif isinstance(msg, OnNextPart | OnNextLastPart):
            if a.part is None:
                a.part, a.part_id = [], msg.element
            if a.part_id == msg.element:
                a.part.append(msg.data)
                if isinstance(msg, OnNextLastPart):
                    a.accepted.append(b"".join(a.part))
                    a.part = None

    def received(self, msg: Message) -> None:
        """The broker's message."""
        if isinstance(msg, Subscribe):
            self.appends[msg.subscriber] = Append()
            return
        sub = getattr(msg, "subscriber", None)
        a = self.appends.get(sub) if sub is not None else None
        if a is None:
            return
        if isinstance(msg, Request):
            a.confirmed += msg.demand
        elif isinstance(msg, OnComplete):
            self.durable.update(a.accepted)
            del self.appends[msg.subscriber]
        elif isinstance(msg, Cancel | OnError):
            self.end(msg.subscriber)

    def end(self, sub: int) -> None:
        a = self.appends.pop(sub)
        self.durable.update(a.accepted[: a.confirmed])

    def closed(self) -> None:
        for sub in list(self.appends):
            self.end(sub)


def random_message(rng: random.Random, model: Model) -> Message:
    live = list(model.appends)
    # mostly to the appends the broker runs, so that many elements get confirmed
    sub = rng.choice(live) if live and rng.random() < 0.8 else rng.randrange(1, 7)
    kind = rng.random()
    if kind < 0.12:
        free = [i for i in range(1, 7) if i not in live]
        sub = rng.choice(free) if free and rng.random() < 0.9 else sub
        return Subscribe(rng.choice(PUBLISHERS), sub, rng.choice([0, 0, 1, 5, 20]))
    if kind < 0.22:
        return Request(sub, rng.choice([0, 1, 3, 20]))
    if kind < 0.26:
        return Cancel(sub)
    if kind < 0.34:
        return Subscribed(sub, rng.choice([0, 0, 8]))
    if kind < 0.70:
        return OnNext(sub, model.body())
    if kind < 0.78:
        n = rng.randrange(1, 5)
        return OnNextPacked(sub, n, b"".join(model.body(8) for _ in range(n)))
    if kind < 0.88:
        kind_ = OnNextLastPart if rng.random() < 0.5 else OnNextPart
        return kind_(sub, 0 if rng.random() < 0.95 else 1, model.body())
    if kind < 0.93:
        return OnComplete(sub)
    if kind < 0.95:
        return OnError(sub, "fuzz")
    if kind < 0.994:
        return Position(sub, rng.randrange(100))
    if kind < 0.997:
        return Hello(0, ())  # a second hello: goodbye and a close
    return Goodbye("fuzz")


def what_the_broker_sees(raw: bytes) -> tuple[list[Message], bool]:
    """The messages the broker takes from ``raw`` sent at a frame boundary, and whether it
    ends the connection on them (framing lost, a malformed frame)."""
    out: list[Message] = []
    try:
        for f in RsioSplitter().feed(raw):
            out.append(decode(f))
    except (FramingLost, Malformed):
        return out, True
    return out, False


class Wire:
    def __init__(self, broker: Broker) -> None:
        self.conn = cast(RsioConnection, LISTENERS["rsio"](broker, False))
        self.transport = FakeTransport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.splitter = RsioSplitter(max_size=0)
        assert list(self.read()) == [Hello(0, (1,))]

    def read(self) -> list[Message]:
        return [decode(f) for f in self.splitter.feed(self.transport.take())]


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(load(data_dir=tmp_path / "data"), LISTENERS)  # never started: no socket
    yield b
    for vhost in b.vhosts.values():
        vhost.close()


def flush(broker: Broker) -> None:
    for stream in broker.vhosts["/"].streams.streams.values():
        stream.flush()


def stored(broker: Broker, name: str) -> list[bytes]:
    stream = broker.vhosts["/"].streams.get(name)
    if stream is None:
        return []
    stream.flush()
    out: list[bytes] = []
    offset = 0
    while chunks := stream.fetch(offset, 1 << 20):
        for ref, data in chunks:
            out += [bytes(r) for r in iter_records(data[HEADER_SIZE : HEADER_SIZE + ref.data_length])]
            offset = ref.chunk_id + ref.num_records
    return out


@pytest.mark.slow  # a long fuzz loop: make test runs it, make test-fast does not
async def test_fuzz_in_process(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(20261123)
    model = Model()
    frames = connections = ended_by_broker = 0
    while frames < FUZZ_FRAMES:
        wire = Wire(broker)
        connections += 1
        model.appends.clear()
        first = encode(Hello(0, (1,) if rng.random() < 0.5 else ()))
        wire.conn.data_received(first if rng.random() < 0.98 else mutate(rng, first))
        for _ in range(rng.randrange(50, 1500)):
            msg = random_message(rng, model)
            raw = encode(msg)
            bad = rng.random() < 0.005
            if bad:
                raw = mutate(rng, raw)
            seen, ends = what_the_broker_sees(raw)
            for m in seen:
                model.sent(m)
            wire.conn.data_received(raw)
            frames += 1
            if frames % 16 == 0:  # the streams' flushes, and so the confirms, now
                flush(broker)
            if frames % 256 == 0:
                await asyncio.sleep(0)  # what waits for the loop (a reader's next pump)
            for m in wire.read():
                model.received(m)
            if wire.transport.closed or bad or ends:
                break
        flush(broker)  # confirms of what was accepted before the close
        for m in wire.read():
            model.received(m)
        if wire.transport.closed:
            ended_by_broker += 1
        wire.conn.connection_lost(None)
        model.closed()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")], \
        "the broker logged an error (an exception in a handler)"
    assert connections > 50 and ended_by_broker > 20
    have = set(stored(broker, "fz-0")) | set(stored(broker, "fz-1"))
    assert model.durable <= have, "a confirmed element is missing from the stream"
    assert len(model.durable) > 3000, "the fuzz confirmed too few elements to mean much"
    # and the broker still serves a clean connection
    wire = Wire(broker)
    wire.conn.data_received(encode(Hello(0, ())) + encode(Subscribe("fz-0?end=now", 1, 10)))
    got = wire.read()
    assert got[0] == Subscribed(1, 0) and all(isinstance(m, OnNext) for m in got[1:])

    again = reopen(broker, caplog)  # stopped and started on the same data: it serves
    try:
        assert model.durable <= set(stored(again, "fz-0")) | set(stored(again, "fz-1"))
        wire = Wire(again)
        wire.conn.data_received(encode(Hello(0, ())) + encode(Subscribe("fz-0?mode=append", 1, 0)))
        assert wire.read()[0] == Subscribed(1, 0)
        wire.conn.data_received(encode(Subscribed(1, 0)) + encode(OnNext(1, b"restarted"))
                                + encode(OnComplete(1)))
        flush(again)
        assert OnComplete(1) in wire.read(), "the append confirmed"
        assert stored(again, "fz-0")[-1] == b"restarted"
    finally:
        close(again)


@pytest.mark.process
async def test_fuzz_over_sockets(tmp_path: Path) -> None:
    b = rsio_broker(tmp_path)
    b.start()
    try:
        rng = random.Random(7)

        async def noise(seed: int) -> None:
            r = random.Random(seed)
            model = Model()
            parts = [encode(Hello(0, (1,)))]
            for _ in range(2000):
                raw = encode(random_message(r, model))
                parts.append(mutate(r, raw) if r.random() < 0.005 else raw)
            reader, writer = await asyncio.open_connection(b.host, b.rsio_port)
            writer.write(b"".join(parts))
            async with asyncio.timeout(60):
                while await reader.read(1 << 16):  # read all it says, until it closes or idles
                    pass
            writer.close()

        async def idle_close(seed: int) -> None:
            with contextlib.suppress(TimeoutError):  # one the broker keeps serving: we end it
                await asyncio.wait_for(noise(seed), 5)

        async def clean() -> list[bytes]:
            async with await RsioClient.connect(b.host, b.rsio_port) as c:
                bodies = [b"clean-%d" % i for i in range(3000)]
                assert await c.publish("fz-clean", bodies, create=True) == 3000
                return bodies

        got = await asyncio.gather(clean(), *[idle_close(rng.randrange(1 << 30)) for _ in range(8)])
        for _ in range(20):
            with socket.create_connection((b.host, b.rsio_port), timeout=10) as s:
                s.sendall(rng.randbytes(rng.randrange(1, 300)))
        assert b.alive()
        async with await RsioClient.connect(b.host, b.rsio_port) as c:
            assert [e.body for e in await c.read("fz-clean")] == got[0]
    finally:
        b.stop()
