"""streamlet.client against a scripted peer on loopback: the paths a healthy broker rarely
takes (server Close, PublishError, CRC mismatch, heartbeats, ConsumerUpdate, old servers).

The peer speaks the protocol with streamlet.rabbitmq; each test scripts what it sends."""

from __future__ import annotations

import asyncio
import gzip
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from streamlet.client import (
    Client,
    ConnectionClosed,
    Consumer,
    Message,
    PublishFailed,
    StreamletError,
    connect,
)
from streamlet.rabbitmq import Code, FrameSplitter, Key, frames
from streamlet.storage.chunk import CHUNK_TRACKING_DELTA, encode_chunk, simple_entry

_SIMPLE: dict[type[frames.Command], type[frames.SimpleResponse]] = {
    frames.DeclarePublisher: frames.DeclarePublisherResponse,
    frames.DeletePublisher: frames.DeletePublisherResponse,
    frames.Subscribe: frames.SubscribeResponse,
    frames.Unsubscribe: frames.UnsubscribeResponse,
    frames.Create: frames.CreateResponse,
    frames.Delete: frames.DeleteResponse,
}


class Peer:
    """A one-connection server: answers the handshake and simple requests, records the rest."""

    def __init__(self, version: str = "3.13.7", frame_max: int = 1048576, heartbeat: int = 60,
                 auto_confirm: bool = True, stored_offset: int | None = None) -> None:
        self.version = version
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self.auto_confirm = auto_confirm
        self.stored_offset = stored_offset
        self.received: list[frames.Command] = []
        self.frame_sizes: list[int] = []
        self.tune_reply: frames.Tune | None = None
        self.exchanged = False
        self.writer: asyncio.StreamWriter | None = None
        self.port = 0
        self._server: asyncio.Server | None = None
        self._arrived = asyncio.Event()

    async def __aenter__(self) -> Peer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.writer is not None:
            self.writer.close()
        assert self._server is not None
        self._server.close()

    def send(self, cmd: frames.Command | bytes) -> None:
        assert self.writer is not None
        self.writer.write(cmd if isinstance(cmd, bytes) else frames.encode(cmd))

    def of(self, kind: type[frames.Command]) -> list[Any]:
        return [c for c in self.received if isinstance(c, kind)]

    async def wait_for(self, kind: type[frames.Command], count: int = 1, timeout: float = 10) -> list[Any]:
        """Wait (bounded) until ``count`` frames of ``kind`` arrived; return them."""
        async with asyncio.timeout(timeout):
            while len(self.of(kind)) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.of(kind)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        splitter = FrameSplitter()
        while data := await reader.read(65536):
            for f in splitter.feed(data):
                self.frame_sizes.append(len(f) + 4)
                cmd = frames.decode(f)
                assert not isinstance(cmd, frames.FrameError), cmd
                self.received.append(cmd)
                self._answer(cmd)
                self._arrived.set()

    def _answer(self, cmd: frames.Command) -> None:
        if isinstance(cmd, frames.PeerProperties):
            self.send(frames.PeerPropertiesResponse(
                cmd.correlation_id, Code.OK, {"product": "scripted", "version": self.version}))
        elif isinstance(cmd, frames.SaslHandshake):
            self.send(frames.SaslHandshakeResponse(cmd.correlation_id, Code.OK, ["PLAIN"]))
        elif isinstance(cmd, frames.SaslAuthenticate):
            ok = cmd.data == b"\0guest\0guest"
            self.send(frames.SaslAuthenticateResponse(
                cmd.correlation_id, Code.OK if ok else Code.AUTHENTICATION_FAILURE))
            if ok:
                self.send(frames.Tune(self.frame_max, self.heartbeat))
        elif isinstance(cmd, frames.Tune):
            self.tune_reply = cmd
        elif isinstance(cmd, frames.Open):
            self.send(frames.OpenResponse(cmd.correlation_id, Code.OK, {"advertised_host": "peer"}))
        elif isinstance(cmd, frames.ExchangeCommandVersions):
            self.exchanged = True
            self.send(frames.ExchangeCommandVersionsResponse(cmd.correlation_id, Code.OK, [
                frames.CommandVersion(k, 1, 1) for k in (Key.PUBLISH, Key.STREAM_STATS)]))
        elif isinstance(cmd, frames.Publish) and self.auto_confirm:
            self.send(frames.PublishConfirm(cmd.publisher_id, [m.publishing_id for m in cmd.messages]))
        elif type(cmd) in _SIMPLE:
            self.send(_SIMPLE[type(cmd)](cmd.correlation_id, Code.OK))  # type: ignore[attr-defined]
        elif isinstance(cmd, frames.QueryOffset):
            if self.stored_offset is None:
                self.send(frames.QueryOffsetResponse(cmd.correlation_id, Code.NO_OFFSET, 0))
            else:
                self.send(frames.QueryOffsetResponse(cmd.correlation_id, Code.OK, self.stored_offset))
        elif isinstance(cmd, frames.StreamStats):
            self.send(frames.StreamStatsResponse(cmd.correlation_id, Code.OK, {"committed_chunk_id": 3}))
        elif isinstance(cmd, frames.Close):
            self.send(frames.CloseResponse(cmd.correlation_id, Code.OK))


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    async with Peer() as p:
        yield p


@pytest.fixture
async def client(peer: Peer) -> AsyncIterator[Client]:
    c = await connect("127.0.0.1", peer.port, timeout=10)
    yield c
    await c.close()


def deliver(sub: int, records: list[bytes], chunk_id: int, *, version: int = 1, timestamp: int = 1000,
            corrupt: bool = False, chunk_type: int = 0, data: bytes | None = None, num_records: int | None = None) -> bytes:
    body = data if data is not None else b"".join(simple_entry(r) for r in records)
    n = num_records if num_records is not None else len(records)
    header, chunk = encode_chunk(body, chunk_id=chunk_id, num_entries=n, num_records=n,
                                 timestamp=timestamp, chunk_type=chunk_type)
    if corrupt:
        chunk = chunk[:-1] + bytes([chunk[-1] ^ 0xFF])
    return frames.encode(frames.Deliver(sub, chunk, 99 if version >= 2 else None, version=version))


async def collect(consumer: Consumer, n: int) -> list[Message]:
    out: list[Message] = []
    async with asyncio.timeout(10):
        async for m in consumer:
            out.append(m)
            if len(out) == n:
                break
    return out


# --- handshake ---------------------------------------------------------------------------


async def test_handshake_negotiates_and_exchanges_versions() -> None:
    async with Peer(version="3.13.7", frame_max=65536, heartbeat=20) as peer:
        async with await connect("127.0.0.1", peer.port, frame_max=1048576, heartbeat=60,
                                 connection_name="unit") as c:
            assert (c.frame_max, c.heartbeat) == (65536, 20)
            assert peer.tune_reply == frames.Tune(65536, 20)
            assert peer.exchanged
            assert c.server_properties["product"] == "scripted"
            assert c.connection_properties == {"advertised_host": "peer"}
            assert peer.of(frames.PeerProperties)[0].properties["connection_name"] == "unit"
            assert c.supports(Key.STREAM_STATS)
            assert not c.supports(Key.CREATE_SUPER_STREAM)
            assert await c.stream_stats("s") == {"committed_chunk_id": 3}
            with pytest.raises(StreamletError) as e:
                await c.create_super_stream("ss", ["a"], ["a"])
            assert e.value.code == Code.UNKNOWN_FRAME
        assert peer.of(frames.Close)  # closed politely


async def test_old_server_is_not_asked_for_versions() -> None:
    async with Peer(version="3.10.8") as peer, await connect("127.0.0.1", peer.port) as c:
        assert not peer.exchanged
        with pytest.raises(StreamletError) as e:
            await c.stream_stats("s")
        assert e.value.code == Code.UNKNOWN_FRAME
        assert not peer.of(frames.StreamStats)  # refused locally, never sent
        assert not c.closed


async def test_bad_credentials(peer: Peer) -> None:
    with pytest.raises(StreamletError) as e:
        await connect("127.0.0.1", peer.port, password="nope")
    assert e.value.code == Code.AUTHENTICATION_FAILURE


class ClosingPeer(Peer):
    """Closes the connection instead of answering SaslHandshake."""

    def _answer(self, cmd: frames.Command) -> None:
        if isinstance(cmd, frames.SaslHandshake):
            self.send(frames.Close(1, Code.ACCESS_REFUSED, "go away"))
        else:
            super()._answer(cmd)


async def test_server_close_during_the_handshake_fails_connect_with_its_code() -> None:
    async with ClosingPeer() as peer:
        with pytest.raises(ConnectionClosed) as e:
            await connect("127.0.0.1", peer.port, timeout=10)
        assert e.value.code == Code.ACCESS_REFUSED
        assert "closed by the server: go away" in str(e.value)
        await peer.wait_for(frames.CloseResponse)  # answered, as after Open


# --- producing ---------------------------------------------------------------------------


async def test_batches_by_batch_size_and_flush(peer: Peer, client: Client) -> None:
    producer = await client.producer("s", batch_size=10)
    ids = [await producer.send(b"m%d" % i) for i in range(25)]
    await producer.flush()
    publishes = peer.of(frames.Publish)
    assert [len(p.messages) for p in publishes] == [10, 10, 5]
    assert [m.publishing_id for p in publishes for m in p.messages] == ids == list(range(1, 26))
    assert [m.entry for p in publishes for m in p.messages] == [simple_entry(b"m%d" % i) for i in range(25)]
    assert producer.confirmed_count == 25 and producer.last_confirmed == 25

    last = await producer.send_many(b"n%d" % i for i in range(25))
    await producer.flush()
    assert last == 50
    assert [len(p.messages) for p in peer.of(frames.Publish)[3:]] == [10, 10, 5]
    await producer.close()
    assert peer.of(frames.DeletePublisher)


async def test_linger_gathers_sends_into_one_frame(peer: Peer, client: Client) -> None:
    producer = await client.producer("s", linger_ms=50)
    for i in range(3):
        await producer.send(b"%d" % i)
    (publish,) = await peer.wait_for(frames.Publish)
    assert [m.publishing_id for m in publish.messages] == [1, 2, 3]


async def test_explicit_ids_move_the_sequence(peer: Peer, client: Client) -> None:
    producer = await client.producer("s")
    assert await producer.send(b"a", publishing_id=100) == 100
    assert await producer.send(b"b") == 101
    assert await producer.send(b"c", publishing_id=5) == 5  # a replay keeps the sequence
    assert await producer.send(b"d") == 102
    await producer.flush()
    assert await producer.send_many([b"e", b"f"], first_id=500) == 501
    assert await producer.send_many([b"g"]) == 502
    assert await producer.send_many([b"h", b"i"], first_id=7) == 8  # replays keep the sequence
    assert await producer.send_many([]) == 502
    await producer.flush()
    assert [m.publishing_id for p in peer.of(frames.Publish) for m in p.messages] == [
        100, 101, 5, 102, 500, 501, 502, 7, 8]


async def test_frames_respect_frame_max() -> None:
    async with Peer(frame_max=4096) as peer, await connect("127.0.0.1", peer.port) as c:
        producer = await c.producer("s", batch_size=100)
        for _ in range(10):
            await producer.send(b"x" * 1000)
        await producer.send_many([b"y" * 1000] * 10)
        await producer.flush()
        publish_sizes = [len(p.messages) for p in peer.of(frames.Publish)]
        assert sum(publish_sizes) == 20
        assert max(peer.frame_sizes) <= 4096
        with pytest.raises(StreamletError) as e:
            await producer.send(b"z" * 4096)
        assert e.value.code == Code.FRAME_TOO_LARGE


async def test_max_unconfirmed_holds_senders_until_confirms() -> None:
    async with Peer(auto_confirm=False) as peer, await connect("127.0.0.1", peer.port) as c:
        producer = await c.producer("s", max_unconfirmed=5, batch_size=2)
        for i in range(5):
            await producer.send(b"%d" % i)
        blocked = asyncio.ensure_future(producer.send(b"6th"))
        await peer.wait_for(frames.Publish, 3)  # 2 + 2 + the 5th, pushed out by the wait
        for _ in range(20):
            await asyncio.sleep(0)
        assert not blocked.done()
        assert producer.unconfirmed == 5
        peer.send(frames.PublishConfirm(producer.publisher_id, [1, 2]))
        assert await asyncio.wait_for(blocked, 10) == 6
        peer.send(frames.PublishConfirm(producer.publisher_id, [3, 4, 5, 6]))
        await asyncio.wait_for(producer.flush(), 10)
        assert producer.confirmed_count == 6


async def test_publish_errors_raise_once_at_flush() -> None:
    async with Peer(auto_confirm=False) as peer, await connect("127.0.0.1", peer.port) as c:
        producer = await c.producer("s")
        await producer.send_many([b"a", b"b", b"c"])
        await peer.wait_for(frames.Publish)
        peer.send(frames.PublishConfirm(producer.publisher_id, [1, 3]))
        peer.send(frames.PublishError(producer.publisher_id, [(2, Code.PUBLISHER_DOES_NOT_EXIST)]))
        with pytest.raises(PublishFailed) as e:
            await asyncio.wait_for(producer.flush(), 10)
        assert e.value.errors == [(2, Code.PUBLISHER_DOES_NOT_EXIST)]
        assert e.value.code == Code.PUBLISHER_DOES_NOT_EXIST
        assert (producer.confirmed_count, producer.error_count) == (2, 1)
        await producer.flush()  # reported once


# --- consuming ---------------------------------------------------------------------------


async def test_deliver_v1_and_v2_with_offset_filter_and_credit(peer: Peer, client: Client) -> None:
    consumer = await client.consumer("s", offset=5, credit=2)
    sub = consumer.subscription_id
    subscribe = peer.of(frames.Subscribe)[0]
    assert (subscribe.offset_type, subscribe.offset, subscribe.credit) == (4, 5, 2)
    peer.send(deliver(sub, [b"r%d" % i for i in range(10)], 0, timestamp=111))
    peer.send(deliver(sub, [b"s%d" % i for i in range(3)], 10, version=2, timestamp=222))
    got = await collect(consumer, 8)
    assert [(m.offset, m.body, m.timestamp, m.chunk_id) for m in got] == (
        [(i, b"r%d" % i, 111, 0) for i in range(5, 10)] + [(10 + i, b"s%d" % i, 222, 10) for i in range(3)])
    credits = await peer.wait_for(frames.Credit, 2)
    assert all((cr.subscription_id, cr.credit) == (sub, 1) for cr in credits)
    assert consumer.next_offset == 13


async def test_chunks_awaitable_skip_tracking_chunks_and_expand_sub_batches(
    peer: Peer, client: Client
) -> None:
    consumer = await client.consumer("s")
    sub = consumer.subscription_id
    peer.send(deliver(sub, [b"t"], 0, chunk_type=CHUNK_TRACKING_DELTA))
    inner = b"".join(struct.pack(">I", len(r)) + r for r in (b"g1", b"g2", b"g3"))
    packed = gzip.compress(inner)
    batch = struct.pack(">BHII", 0x80 | (1 << 4), 3, len(inner), len(packed)) + packed
    peer.send(deliver(sub, [], 1, data=simple_entry(b"plain") + batch, num_records=4))
    chunks = await consumer.chunks()
    async with asyncio.timeout(10):
        header, records, first = await chunks.__anext__()
    assert (header.chunk_id, first, records) == (1, 1, [b"plain", b"g1", b"g2", b"g3"])
    assert consumer.last_offset == 4
    async with asyncio.timeout(10):  # credit comes back for the tracking chunk too
        while sum(c.credit for c in peer.of(frames.Credit)) < 2:
            await asyncio.sleep(0.01)
    assert sum(c.credit for c in peer.of(frames.Credit)) == 2


async def test_bad_crc_is_refused(peer: Peer, client: Client) -> None:
    consumer = await client.consumer("s")
    peer.send(deliver(consumer.subscription_id, [b"abc"], 0, corrupt=True))
    with pytest.raises(StreamletError) as e:
        await collect(consumer, 1)
    assert "CRC" in e.value.message
    trusting = await client.consumer("s", check_crc=False)
    peer.send(deliver(trusting.subscription_id, [b"abc"], 0, corrupt=True))
    assert len(await collect(trusting, 1)) == 1


async def test_consumer_update_resumes_after_stored_offset() -> None:
    async with Peer(stored_offset=41) as peer, await connect("127.0.0.1", peer.port) as c:
        consumer = await c.consumer("s", name="group", properties={"single-active-consumer": "true"})
        assert peer.of(frames.Subscribe)[0].properties == {"single-active-consumer": "true", "name": "group"}
        peer.send(frames.ConsumerUpdate(77, consumer.subscription_id, 1))
        (answer,) = await peer.wait_for(frames.ConsumerUpdateResponse)
        assert (answer.correlation_id, answer.code, answer.offset_type, answer.offset) == (77, Code.OK, 4, 42)
        peer.send(frames.ConsumerUpdate(78, consumer.subscription_id, 0))
        answers = await peer.wait_for(frames.ConsumerUpdateResponse, 2)
        assert (answers[1].correlation_id, answers[1].offset_type) == (78, 0)
        assert not consumer.active


# --- server events -----------------------------------------------------------------------


async def test_metadata_update_ends_producers_and_consumers_of_that_stream(
    peer: Peer, client: Client
) -> None:
    calls: list[tuple[str, int]] = []
    async_calls: list[str] = []

    async def later(stream: str, code: int) -> None:
        async_calls.append(stream)

    client.on_metadata_update = [lambda s, code: calls.append((s, code)), later]
    gone_c = await client.consumer("gone")
    kept_c = await client.consumer("kept")
    gone_p = await client.producer("gone")
    kept_p = await client.producer("kept")
    peer.send(deliver(gone_c.subscription_id, [b"before"], 0))
    peer.send(frames.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, "gone"))
    assert [m.body for m in await collect(gone_c, 1)] == [b"before"]  # buffered data first
    with pytest.raises(StreamletError) as e:
        await collect(gone_c, 1)
    assert e.value.code == Code.STREAM_NOT_AVAILABLE
    assert calls == [("gone", Code.STREAM_NOT_AVAILABLE)]
    assert gone_p.closed and not kept_p.closed and not kept_c.closed
    with pytest.raises(StreamletError):
        await gone_p.send(b"x")
    await kept_p.send(b"y")
    await kept_p.flush()
    for _ in range(10):
        await asyncio.sleep(0)
    assert async_calls == ["gone"]


async def test_server_close_fails_everything_with_its_code(peer: Peer, client: Client) -> None:
    consumer = await client.consumer("s")
    waiting = asyncio.ensure_future(collect(consumer, 1))
    peer.send(frames.Close(9, Code.ACCESS_REFUSED, "go away"))
    (answer,) = await peer.wait_for(frames.CloseResponse)
    assert answer.correlation_id == 9
    with pytest.raises(ConnectionClosed) as e:
        await waiting
    assert e.value.code == Code.ACCESS_REFUSED and "go away" in e.value.message
    assert client.closed
    with pytest.raises(ConnectionClosed):
        await client.stream_exists("s")


async def test_unknown_frames_are_skipped(peer: Peer, client: Client) -> None:
    peer.send(struct.pack(">IHH", 6, 0x7F00, 1) + b"??")  # a key this client does not know
    assert await client.query_offset("r", "s") is None
    assert not client.closed


async def test_lost_connection_fails_waiters(peer: Peer, client: Client) -> None:
    peer.auto_confirm = False
    producer = await client.producer("s")
    await producer.send(b"unconfirmed")
    await peer.wait_for(frames.Publish)
    assert peer.writer is not None
    peer.writer.transport.abort()
    with pytest.raises(ConnectionClosed) as e:
        await asyncio.wait_for(producer.flush(), 10)
    assert e.value.code == Code.STREAM_NOT_AVAILABLE


async def test_server_heartbeats_are_not_echoed(peer: Peer, client: Client) -> None:
    """The client's own timer keeps the connection alive; echoing could ping-pong with a
    server that echoes too."""
    assert client.heartbeat == 60  # no tick of our own during this test
    seen = asyncio.Event()
    client.on_metadata_update = lambda s, code: seen.set()
    mark = len(peer.received)
    peer.send(frames.Heartbeat())
    peer.send(frames.Heartbeat())
    peer.send(frames.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, "marker"))
    await asyncio.wait_for(seen.wait(), 10)  # the heartbeats before it were read
    await client.query_offset("r", "s")
    assert [type(c) for c in peer.received[mark:]] == [frames.QueryOffset]


async def test_idle_heartbeats_then_missed_server_heartbeats_close() -> None:
    async with Peer(heartbeat=1) as peer, await connect("127.0.0.1", peer.port) as c:
        assert c.heartbeat == 1
        opened = time.monotonic()  # the peer's last frame came just before
        # the peer stays silent: after two silent intervals the client gives up
        async with asyncio.timeout(15):
            while not c.closed:
                await asyncio.sleep(0.05)
        silence = time.monotonic() - opened
        assert 1.9 <= silence < 3.5, silence
        # meanwhile it sent a heartbeat every half interval it had nothing else to send
        assert len(peer.of(frames.Heartbeat)) >= 3
        with pytest.raises(ConnectionClosed) as e:
            await c.stream_exists("s")
        assert e.value.code == Code.STREAM_NOT_AVAILABLE


async def test_credit_goes_back_in_batches_and_whenever_the_queue_empties(
    peer: Peer, client: Client
) -> None:
    """Credit 8: with 8 chunks queued, credit goes back a quarter (2) at a time, one frame per
    batch; then a lone chunk taken from a queue that runs empty gives its credit back at once."""
    consumer = await client.consumer("s", credit=8)
    sub = consumer.subscription_id
    for i in range(8):
        peer.send(deliver(sub, [b"m%d" % i], i))
    async with asyncio.timeout(10):
        while len(consumer._queue) < 8:
            await asyncio.sleep(0.01)
    for _ in range(8):
        await consumer.next_raw_chunk()
    assert [c.credit for c in await peer.wait_for(frames.Credit, 4)] == [2, 2, 2, 2]
    peer.send(deliver(sub, [b"m8"], 8))
    await consumer.next_raw_chunk()
    assert [c.credit for c in await peer.wait_for(frames.Credit, 5)][-1] == 1
