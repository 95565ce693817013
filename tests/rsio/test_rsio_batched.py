"""RSIO's batched paths against a real broker process: the onNext elements of one read
appended as one batch (demand given back per confirmed batch, a violation in the middle of a
read keeping what came before), and a subscription's runs of stored records sent as frames built
in one call (records sent in parts or one by one in between, demand and positions kept, packed
frames running on over chunks' boundaries)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rstream import ConsumerOffsetSpecification, OffsetType, RawMessage
from rstream import Producer as RProducer

from streamlet.client.rsio import RsioClient
from streamlet.rsio import (
    Cancel,
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
)
from tests.broker.test_rstream import consume as rstream_consume
from tests.rsio.test_rsio import Peer, RsioBroker
from tests.support.brokers import free_port

pytestmark = pytest.mark.process

WINDOW = 5_000
SPLIT = 1_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RsioBroker]:
    root = tmp_path_factory.mktemp("rsio-batched")
    port = free_port()
    cfg = root / "rsio.toml"
    cfg.write_text(f"[listeners.rsio]\nport = {port}\nsplit_bytes = {SPLIT}\nwindow = {WINDOW}\n")
    root.joinpath("data").mkdir()
    b = RsioBroker(root / "data", config=cfg)
    b.rsio_port = port
    b.start()
    yield b
    b.stop()


async def start_append(p: Peer, stream: str, sub: int) -> None:
    p.send(Subscribe(f"{stream}?mode=append&create=true", sub, 0))
    assert await p.recv(2) == [Subscribed(sub, 0),
                               Subscribe(f"{stream}?mode=append&create=true", sub, WINDOW)]
    p.send(Subscribed(sub, 0))


async def given_back(p: Peer, want: dict[int, int]) -> dict[int, int]:
    """Wait for ``want[sub]`` elements of demand back for each sub; how many request frames
    gave them, by sub."""
    given = dict.fromkeys(want, 0)
    frames = dict.fromkeys(want, 0)
    while given != want:
        (req,) = await p.recv(1)
        assert isinstance(req, Request) and req.subscriber in want
        given[req.subscriber] += req.demand
        frames[req.subscriber] += 1
        assert given[req.subscriber] <= want[req.subscriber]
    return frames


async def test_a_read_of_elements_is_appended_as_one_batch(broker: RsioBroker) -> None:
    p = await Peer.open(broker)
    await start_append(p, "b-many", 1)
    await start_append(p, "b-many-2", 300)  # a subscriber id of two bytes: the general way
    bodies = [b"m-%d" % i for i in range(4_000)]
    # one write: elements of both appends interleaved
    p.writer.write(b"".join(encode(OnNext(1, b)) + encode(OnNext(300, b)) for b in bodies))
    frames = await given_back(p, {1: 4_000, 300: 4_000})
    assert frames[1] < 400 and frames[300] < 400  # demand comes back per batch
    p.send(OnComplete(1), OnComplete(300))
    assert sorted(map(repr, await p.recv(2))) == sorted(map(repr, [OnComplete(1),
                                                                  OnComplete(300)]))
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        assert [e.body for e in await c.read("b-many")] == bodies
        assert [e.body for e in await c.read("b-many-2")] == bodies
    p.close()


async def test_a_violation_inside_a_read_keeps_what_came_before(broker: RsioBroker) -> None:
    p = await Peer.open(broker)
    await start_append(p, "b-viol", 1)
    bodies = [b"v-%d" % i for i in range(WINDOW + 3)]  # three more than granted, in one write
    p.writer.write(b"".join(encode(OnNext(1, b)) for b in bodies))
    got: list[Message] = []
    while not got or not isinstance(got[-1], OnError):
        got += await p.recv(1)
    requests = [m for m in got if isinstance(m, Request)]
    assert got[len(requests):] == [Cancel(1), got[-1]] and "requested" in got[-1].error
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        assert [e.body for e in await c.read("b-viol")] == bodies[:WINDOW]
    p.close()


async def read_all(p: Peer, sub: int, step: int) -> list[Message]:
    """Every message of subscription ``sub`` until it completes, ``step`` elements of demand at
    a time (the next request sent once the last is used up)."""
    out: list[Message] = []
    left = step
    while True:
        (msg,) = await p.recv(1)
        out.append(msg)
        if isinstance(msg, OnComplete | OnError):
            return out
        if isinstance(msg, OnNext | OnNextLastPart):
            left -= 1
        elif isinstance(msg, OnNextPacked):
            left -= msg.count
        assert left >= 0  # never more than the demand
        if left == 0:
            left = step
            p.send(Request(sub, step))


async def test_runs_and_records_sent_one_by_one_in_between(broker: RsioBroker) -> None:
    big = bytes(range(250)) * 10  # 2,500 bytes: in parts of SPLIT
    bodies = [b"r-%d" % i for i in range(300)]
    bodies[20] = bodies[150] = big
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        assert await c.publish("b-runs", bodies, create=True) == 300
    p = await Peer.open(broker)
    for step in (1, 7, 1_000):
        p.send(Subscribe("b-runs?end=now", step, step))
        got = await read_all(p, step, step)
        assert got[:2] == [Subscribed(step, 0), Position(step, 0)]
        assert not any(isinstance(m, Position) for m in got[2:])  # offsets follow on
        elements, part = [], b""
        for m in got[2:-1]:
            if isinstance(m, OnNextPart):
                part += m.data
            elif isinstance(m, OnNextLastPart):
                elements.append(part + m.data)
                part = b""
            else:
                assert isinstance(m, OnNext)
                elements.append(m.element)
        assert elements == bodies and got[-1] == OnComplete(step)
    p.close()


async def test_packed_frames_run_on_over_chunks(broker: RsioBroker) -> None:
    ints = [i.to_bytes(4, "big") for i in range(600)]
    p = await Peer.open(broker)
    await start_append(p, "b-packed", 1)
    for at in range(0, 600, 100):  # six reads: six chunks, or more
        p.send(*(OnNext(1, b) for b in ints[at : at + 100]))
        await given_back(p, {1: 100})
    p.send(Subscribe("b-packed?end=now&element_size=4", 2, 600))
    # split 1,000 / 4 bytes: 250 elements a frame, whatever the chunks
    assert await p.recv(6) == [Subscribed(2, 4), Position(2, 0),
                               OnNextPacked(2, 250, b"".join(ints[:250])),
                               OnNextPacked(2, 250, b"".join(ints[250:500])),
                               OnNextPacked(2, 100, b"".join(ints[500:])), OnComplete(2)]
    p.close()


async def test_sub_entry_batches_between_runs(broker: RsioBroker) -> None:
    """Records of a sub-entry batch go the general way, between runs of simple entries (in one
    chunk or in chunks of their own): every element as rstream reads it, in order."""
    name = "b-sub-entry"
    async with RProducer(broker.host, broker.port, username="guest", password="guest") as rp:
        await rp.create_stream(name)
        await rp.send_batch(name, [RawMessage(b"a-%d" % i) for i in range(200)])
        await rp.send_sub_entry(name, [RawMessage(b"sub-%d" % i) for i in range(5)])
        await rp.send_batch(name, [RawMessage(b"b-%d" % i) for i in range(50)])
    want = await rstream_consume(broker, name, ConsumerOffsetSpecification(OffsetType.FIRST), 255)
    p = await Peer.open(broker)
    for step in (3, 1_000):
        p.send(Subscribe(f"{name}?end=now", step, step))
        got = await read_all(p, step, step)
        assert got[:2] == [Subscribed(step, 0), Position(step, 0)] and got[-1] == OnComplete(step)
        assert got[2:-1] == [OnNext(step, b) for _, b in want]  # offsets follow on throughout
    p.close()
