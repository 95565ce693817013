"""kill -9 the broker while a producer publishes: every confirmed message survives, once, in order."""

from __future__ import annotations

import threading
import time

import pytest

from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.storage import chunk
from tests.support.brokers import BrokerProcess
from tests.support.raw import RawPeer

pytestmark = pytest.mark.process


def _publish_until_killed(b: BrokerProcess, confirmed: list[int], stop: threading.Event) -> None:
    """Publish numbered messages in frames of 50; record confirmed ids until the socket dies."""
    with RawPeer(b.host, b.port) as peer:
        peer.handshake()
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, "crash-writer", "crash"),
                     f.DeclarePublisherResponse)
        next_id = 1
        try:
            while not stop.is_set():
                msgs = [f.PublishedMessage.simple(i, b"msg-%08d" % i) for i in range(next_id, next_id + 50)]
                next_id += 50
                peer.send(f.Publish(1, msgs))
                while True:  # wait for this frame's confirm, keeping a window of one frame
                    cmd = peer.recv()
                    if cmd is None:
                        return
                    if isinstance(cmd, f.PublishConfirm):
                        confirmed.extend(cmd.publishing_ids)
                        if cmd.publishing_ids[-1] == next_id - 1:
                            break
        except OSError:
            return


def _read_all(b: BrokerProcess, stream: str) -> list[bytes]:
    with RawPeer(b.host, b.port) as peer:
        peer.handshake()
        stats = peer.request(f.StreamStats(peer.next_corr(), stream), f.StreamStatsResponse)
        assert isinstance(stats, f.StreamStatsResponse) and stats.code == Code.OK
        last = stats.stats["last_chunk_id"]
        peer.request(f.Subscribe(peer.next_corr(), 1, stream, 1, 0, 1000), f.SubscribeResponse)
        bodies: list[bytes] = []
        while True:
            d = peer.recv_until(f.Deliver)
            assert isinstance(d, f.Deliver)
            header = chunk.ChunkHeader.unpack(d.chunk)
            data = d.chunk[chunk.HEADER_SIZE : chunk.HEADER_SIZE + header.data_length]
            assert chunk.crc32(data) == header.data_crc
            bodies.extend(bytes(r) for r in chunk.iter_records(data))
            if header.chunk_id >= last:
                return bodies


def test_kill9_while_publishing_loses_nothing_confirmed(broker: BrokerProcess) -> None:
    with RawPeer(broker.host, broker.port) as peer:
        peer.handshake()
        peer.request(f.Create(peer.next_corr(), "crash", {}), f.CreateResponse)
    confirmed: list[int] = []
    stop = threading.Event()
    t = threading.Thread(target=_publish_until_killed, args=(broker, confirmed, stop), daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while len(confirmed) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()  # SIGKILL mid-stream
    stop.set()
    t.join(10)
    assert len(confirmed) >= 1000, "the producer should have made progress before the kill"

    broker.start()
    bodies = _read_all(broker, "crash")
    ids = [int(b.split(b"-")[1]) for b in bodies]
    # exactly once and in order: ids are 1..n with no gap and no repeat
    assert ids == list(range(1, len(ids) + 1))
    # everything confirmed is there
    assert len(ids) >= max(confirmed)

    # the stream accepts new writes, and deduplication resumes where the log ends
    with RawPeer(broker.host, broker.port) as peer:
        peer.handshake()
        seq = peer.request(f.QueryPublisherSequence(peer.next_corr(), "crash-writer", "crash"),
                           f.QueryPublisherSequenceResponse)
        assert isinstance(seq, f.QueryPublisherSequenceResponse) and seq.sequence == len(ids)
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, "crash-writer", "crash"),
                     f.DeclarePublisherResponse)
        n = len(ids)
        peer.send(f.Publish(1, [f.PublishedMessage.simple(n, b"dup"),
                                f.PublishedMessage.simple(n + 1, b"msg-%08d" % (n + 1))]))
        got: list[int] = []
        while len(got) < 2:
            c = peer.recv_until(f.PublishConfirm)
            assert isinstance(c, f.PublishConfirm)
            got += c.publishing_ids
        assert sorted(got) == [n, n + 1]
    after = _read_all(broker, "crash")
    assert len(after) == n + 1 and after[-1] == b"msg-%08d" % (n + 1)
