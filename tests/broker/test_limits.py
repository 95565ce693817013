"""Limits: a silent peer is closed after missed heartbeats, a consumer that never reads does
not grow the broker's memory, and connection limits per broker and per user hold."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamlet.client import StreamletError, connect
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from tests.support.brokers import BrokerProcess
from tests.support.raw import RawPeer
from tests.support.waiting import eventually

pytestmark = pytest.mark.process


def _open_with_heartbeat(peer: RawPeer, heartbeat: int) -> None:
    tune = peer.authenticate()
    peer.send(f.Tune(tune.frame_max, heartbeat))
    peer.send(f.Open(peer.next_corr(), "/"))
    peer.recv_until(f.OpenResponse)


def test_missed_heartbeats_close_the_connection(shared_broker: BrokerProcess) -> None:
    with RawPeer(shared_broker.host, shared_broker.port, timeout=20) as peer:
        _open_with_heartbeat(peer, 1)
        heartbeats = 0
        while True:  # the broker sends heartbeats, then gives up on a peer that sends nothing
            cmd = peer.recv()
            if cmd is None:
                break
            heartbeats += isinstance(cmd, f.Heartbeat)
        assert heartbeats >= 1
    assert shared_broker.alive()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
async def test_consumer_that_never_reads_does_not_grow_broker_memory(broker: BrokerProcess) -> None:
    stream, body, count = "never-read", b"x" * 65536, 1600  # 100 MiB stored
    async with await connect(broker.host, broker.port) as c:
        await c.create_stream(stream)
        producer = await c.producer(stream)
        for _ in range(0, count, 100):
            await producer.send_many([body] * 100)
        await producer.close()
    baseline = broker.rss_kib()

    # a raw consumer with all the credit it can ask for that never reads its socket
    stuck = socket.create_connection((broker.host, broker.port))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    peer = RawPeer.__new__(RawPeer)
    peer.sock, peer.buf, peer.corr = stuck, b"", 0
    peer.handshake()
    peer.send(f.Subscribe(peer.next_corr(), 1, stream, 1, 0, 0xFFFF))  # from the first offset

    # meanwhile a well-behaved consumer reads all of it through the same broker
    async with await connect(broker.host, broker.port) as c:
        consumer = await c.consumer(stream, "first", credit=20)
        n = 0
        async for m in consumer:
            n += 1
            if m.offset >= count - 1:
                break
    assert n == count
    grown_mib = (broker.rss_kib() - baseline) / 1024
    stuck.close()
    # without back-pressure the stuck consumer would hold ~100 MiB of chunks in the broker
    assert grown_mib < 40, f"broker RSS grew by {grown_mib:.0f} MiB"
    assert broker.alive()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
async def test_each_consumer_that_never_reads_costs_at_most_the_documented_buffer(
        broker: BrokerProcess) -> None:
    """docs/reliability.md: 2 MiB of outgoing buffer plus one chunk plus 256 KiB read-ahead per
    consumer that does not read. Before, 4 MiB plus a whole 1 MiB pump: ~5 MiB each."""
    stream, consumers = "never-read-many", 20
    async with await connect(broker.host, broker.port) as c:
        await c.create_stream(stream)
        producer = await c.producer(stream)
        for _ in range(200):  # 50 MiB in chunks of at most ~256 KiB (256 entries of 1 KiB)
            await producer.send_many([b"y" * 1024] * 256)
            await producer.flush()
        await producer.close()
    baseline = broker.rss_kib()
    stuck: list[socket.socket] = []
    try:
        for _ in range(consumers):
            sock = socket.create_connection((broker.host, broker.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            stuck.append(sock)
            peer = RawPeer.__new__(RawPeer)
            peer.sock, peer.buf, peer.corr = sock, b"", 0
            peer.handshake()
            peer.send(f.Subscribe(peer.next_corr(), 1, stream, 1, 0, 0xFFFF))

        # it grows while the broker fills each buffer, then stays: poll until it stops
        settled = await asyncio.to_thread(broker.settled_rss_kib, 60, 10, 256)
        per_consumer_mib = (settled - baseline) / 1024 / consumers
        assert per_consumer_mib < 3.5, f"{per_consumer_mib:.1f} MiB per consumer that does not read"
    finally:
        for sock in stuck:
            sock.close()
    assert broker.alive()


async def test_connection_limits(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    cfg = tmp_path / "limits.toml"
    cfg.write_text('[limits]\nmax_connections = 3\nmax_connections_per_user = 2\n'
                   '[[users]]\nname = "guest"\npassword = "guest"\n'
                   '[[users]]\nname = "solo"\npassword = "solo"\nmax_connections = 1\n')
    b = broker_factory(config=cfg)
    solo = await connect(b.host, b.port, user="solo", password="solo")
    with pytest.raises(StreamletError) as err:
        await connect(b.host, b.port, user="solo", password="solo")  # solo's own limit: 1
    assert err.value.code == Code.ACCESS_REFUSED
    g1 = await connect(b.host, b.port)

    async def second_guest() -> object:  # accepted once the refused connection's close is seen
        try:
            return await connect(b.host, b.port)
        except (StreamletError, ConnectionError, OSError):
            return None

    g2 = await eventually(second_guest, what="a slot freed by the refused connection")
    with pytest.raises((StreamletError, ConnectionError, OSError)):
        await connect(b.host, b.port, timeout=5)  # the broker's limit: 3
    await solo.close()
    for _ in range(50):  # the broker notices the close asynchronously
        try:
            g3 = await connect(b.host, b.port, user="solo", password="solo")
            break
        except (StreamletError, ConnectionError, OSError):
            await asyncio.sleep(0.05)
    else:
        raise AssertionError("a freed connection slot was never reusable")
    with pytest.raises((StreamletError, ConnectionError, OSError)):
        await connect(b.host, b.port, timeout=5)  # the broker is full again
    for c in (g1, g2, g3):
        await c.close()


async def test_per_user_limit_from_limits_section(broker_factory: Callable[..., BrokerProcess],
                                                  tmp_path: Path) -> None:
    cfg = tmp_path / "limits.toml"
    cfg.write_text('[limits]\nmax_connections_per_user = 1\n'
                   '[[users]]\nname = "guest"\npassword = "guest"\n'
                   '[[users]]\nname = "other"\npassword = "other"\n')
    b = broker_factory(config=cfg)
    async with await connect(b.host, b.port):
        with pytest.raises(StreamletError) as err:
            await connect(b.host, b.port)
        assert err.value.code == Code.ACCESS_REFUSED
        async with await connect(b.host, b.port, user="other", password="other"):
            pass  # another user has its own count


def test_a_peer_that_never_opens_is_closed(broker_factory: Callable[..., BrokerProcess],
                                           tmp_path: Path) -> None:
    cfg = tmp_path / "handshake.toml"
    cfg.write_text("[server]\nhandshake_timeout = 1\n")
    b = broker_factory(config=cfg)
    with RawPeer(b.host, b.port, timeout=20) as silent:
        assert silent.closed()
    with RawPeer(b.host, b.port, timeout=20) as halfway:
        halfway.send(f.PeerProperties(halfway.next_corr(), {}))
        halfway.recv_until(f.PeerPropertiesResponse)
        close = halfway.recv_until(f.Close)
        assert isinstance(close, f.Close) and close.code == Code.ACCESS_REFUSED
    with RawPeer(b.host, b.port, timeout=20) as opened:
        opened.handshake()
        opened.send(f.Heartbeat())
        time.sleep(1.5)  # past the handshake timeout: an opened connection stays
        meta = opened.request(f.Metadata(opened.next_corr(), ["x"]), f.MetadataResponse)
        assert isinstance(meta, f.MetadataResponse)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_a_publisher_that_never_reads_its_confirms_is_held_back(broker: BrokerProcess) -> None:
    """Confirms a publisher does not read must not pile up in the broker: once its outgoing
    buffer is full the broker stops reading from that connection, and TCP holds the
    publisher back. When it reads again, everything it sent is confirmed and stored."""
    frame_messages = 20_000
    with RawPeer(broker.host, broker.port, timeout=3.0) as peer:
        peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        peer.handshake()
        peer.request(f.Create(peer.next_corr(), "unread-confirms", {}), f.CreateResponse)
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, None, "unread-confirms"),
                     f.DeclarePublisherResponse)
        baseline = broker.rss_kib()
        sent = 0
        blocked = False
        next_id = 1
        # 1-byte bodies: a confirm (8 bytes) is 60% of what the message took to send
        while sent < 400_000_000:
            frame = f.encode(f.Publish(1, [f.PublishedMessage.simple(i, b"x")
                                           for i in range(next_id, next_id + frame_messages)]))
            try:
                peer.sock.sendall(frame)
            except TimeoutError:
                blocked = True
                break
            next_id += frame_messages
            sent += len(frame)
        grown_mib = (broker.rss_kib() - baseline) / 1024
        assert blocked, f"the broker kept reading {sent >> 20} MiB from a publisher that reads nothing"
        assert grown_mib < 60, f"broker memory grew {grown_mib:.0f} MiB"
        # now read: every id of every frame fully sent comes back confirmed
        peer.sock.settimeout(30)
        confirmed = 0
        while confirmed < next_id - 1:
            c = peer.recv_until(f.PublishConfirm)
            assert isinstance(c, f.PublishConfirm)
            confirmed += len(c.publishing_ids)
        assert confirmed >= next_id - 1
    assert broker.alive()
