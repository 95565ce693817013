"""Bad input gets the protocol's code or a closed connection; the broker and every other
connection carry on."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from streamlet.broker.config.model import DEFAULT_FRAME_LIMIT
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.storage import chunk
from tests.support.brokers import BrokerProcess
from tests.support.raw import RawPeer

pytestmark = pytest.mark.process


@pytest.fixture
def bystander(shared_broker: BrokerProcess) -> Iterator[RawPeer]:
    """A well-behaved connection that must be unaffected by each bad one."""
    peer = RawPeer(shared_broker.host, shared_broker.port)
    peer.handshake()
    peer.request(f.Create(peer.next_corr(), "bystander", {}), f.CreateResponse)
    yield peer
    # still served after the misbehaviour:
    meta = peer.request(f.Metadata(peer.next_corr(), ["bystander"]), f.MetadataResponse)
    assert isinstance(meta, f.MetadataResponse) and meta.streams[0].code == Code.OK
    assert shared_broker.alive()
    peer.close()


def test_garbage_bytes_close_the_connection(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)))
        assert peer.closed()


def test_frame_over_frame_max_before_open(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.send_raw(struct.pack(">I", 9000) + b"\0" * 16)  # over the 8192 pre-Open cap
        close = peer.recv()
        assert isinstance(close, f.Close) and close.code == Code.FRAME_TOO_LARGE
        assert peer.closed()


def test_frame_over_the_hard_frame_limit(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    """Past frame_max a frame is still taken (as RabbitMQ does), up to server.frame_limit;
    a size prefix over that is refused before anything is buffered."""
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.handshake()
        peer.send_raw(struct.pack(">I", DEFAULT_FRAME_LIMIT) + b"\0\x02\0\x01")
        close = peer.recv()
        assert isinstance(close, f.Close) and close.code == Code.FRAME_TOO_LARGE
        assert peer.closed()


def test_wrong_password(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        with pytest.raises(PermissionError) as err:
            peer.handshake(password="wrong")
        assert err.value.args[0] == Code.AUTHENTICATION_FAILURE
        assert peer.closed()


def test_commands_before_open(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.send(f.Create(7, "sneaky", {}))
        resp = peer.recv()
        assert isinstance(resp, f.SimpleResponse) and resp.code == Code.ACCESS_REFUSED
        assert peer.closed()
    meta = bystander.request(f.Metadata(bystander.next_corr(), ["sneaky"]), f.MetadataResponse)
    assert isinstance(meta, f.MetadataResponse)
    assert meta.streams[0].code == Code.STREAM_DOES_NOT_EXIST


def test_unknown_key(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.handshake()
        peer.send_raw(struct.pack(">IHHI", 8, 0x0063, 1, 42))
        frame = peer.recv_frame()
        assert frame is not None
        key, _, corr, code = struct.unpack(">HHIH", frame)
        assert (key, corr, code) == (0x8063, 42, Code.UNKNOWN_FRAME)
        assert peer.closed()


def test_truncated_frame_body(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.handshake()
        whole = f.encode(f.Create(5, "truncated", {"max-age": "1D"}))
        body = whole[4:-3]
        peer.send_raw(struct.pack(">I", len(body)) + body)
        frame = peer.recv_frame()
        assert frame is not None
        key, _, corr, code = struct.unpack(">HHIH", frame)
        assert (key, corr, code) == (0x800D, 5, Code.UNKNOWN_FRAME)
        assert peer.closed()


def test_subscribe_to_missing_stream(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.handshake()
        resp = peer.request(f.Subscribe(peer.next_corr(), 1, "missing", 1, 0, 10), f.SubscribeResponse)
        assert isinstance(resp, f.SimpleResponse) and resp.code == Code.STREAM_DOES_NOT_EXIST
        # the connection stays usable
        meta = peer.request(f.Metadata(peer.next_corr(), ["missing"]), f.MetadataResponse)
        assert isinstance(meta, f.MetadataResponse)
        assert meta.streams[0].code == Code.STREAM_DOES_NOT_EXIST
        assert meta.streams[0].leader == 0xFFFF


def test_bad_create_arguments_and_names(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.handshake()
        cases = [
            ("bad-age", {"max-age": "forever"}),
            ("bad-len", {"max-length-bytes": "-5"}),
            ("bad-filter", {"stream-filter-size-bytes": "300"}),
            ("bad-arg", {"no-such-argument": "1"}),
            ("amq.reserved", {}),
            ("", {}),
        ]
        for name, args in cases:
            resp = peer.request(f.Create(peer.next_corr(), name, args), f.CreateResponse)
            assert isinstance(resp, f.SimpleResponse)
            assert resp.code == Code.PRECONDITION_FAILED, (name, args)
        ok = peer.request(f.Create(peer.next_corr(), "odd/name ..", {"max-age": "12h"}), f.CreateResponse)
        assert isinstance(ok, f.SimpleResponse) and ok.code == Code.OK
        again = peer.request(f.Create(peer.next_corr(), "odd/name ..", {}), f.CreateResponse)
        assert isinstance(again, f.SimpleResponse) and again.code == Code.STREAM_ALREADY_EXISTS
        gone = peer.request(f.Delete(peer.next_corr(), "never-was"), f.DeleteResponse)
        assert isinstance(gone, f.SimpleResponse) and gone.code == Code.STREAM_DOES_NOT_EXIST


def test_publish_with_undeclared_publisher(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.handshake()
        peer.send(f.Publish(9, [f.PublishedMessage.simple(1, b"x")]))
        err = peer.recv_until(f.PublishError)
        assert isinstance(err, f.PublishError)
        assert err.errors == [(1, Code.PUBLISHER_DOES_NOT_EXIST)]


def test_credit_for_unknown_subscription(shared_broker: BrokerProcess, bystander: RawPeer) -> None:
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.handshake()
        peer.send(f.Credit(77, 1))
        resp = peer.recv_until(f.CreditResponse)
        assert isinstance(resp, f.CreditResponse)
        assert (resp.code, resp.subscription_id) == (Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, 77)


def test_a_frame_with_more_messages_than_a_chunk_holds(shared_broker: BrokerProcess) -> None:
    """70,000 messages in one Publish (more than a chunk's u16 NumEntries), from a publisher
    with a reference, and again: every message stored once, the repeat confirmed, not stored."""
    n = 70_000
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.handshake()
        peer.request(f.Create(peer.next_corr(), "huge-frame", {}), f.CreateResponse)
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, "huge", "huge-frame"),
                     f.DeclarePublisherResponse)
        frame = f.Publish(1, [f.PublishedMessage.simple(i, b"%d" % (i % 10)) for i in range(1, n + 1)])
        for _ in range(2):
            peer.send(frame)
            confirmed = 0
            while confirmed < n:
                c = peer.recv_until(f.PublishConfirm)
                assert isinstance(c, f.PublishConfirm)
                confirmed += len(c.publishing_ids)
        stats = peer.request(f.StreamStats(peer.next_corr(), "huge-frame"), f.StreamStatsResponse)
        assert isinstance(stats, f.StreamStatsResponse)
        seq = peer.request(f.QueryPublisherSequence(peer.next_corr(), "huge", "huge-frame"),
                           f.QueryPublisherSequenceResponse)
        assert isinstance(seq, f.QueryPublisherSequenceResponse) and seq.sequence == n
        peer.request(f.Subscribe(peer.next_corr(), 1, "huge-frame", 1, 0, 100), f.SubscribeResponse)
        records = 0
        while True:
            d = peer.recv_until(f.Deliver)
            assert isinstance(d, f.Deliver)
            header = chunk.ChunkHeader.unpack(d.chunk)
            assert header.num_entries <= 0xFFFF
            records += header.num_records
            if header.chunk_id >= stats.stats["last_chunk_id"]:
                break
        assert records == n
