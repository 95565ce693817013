"""Frames as a careless or hostile peer sends them (hardening): frames written with
Open, frames before an oversize one, handshake commands after Open, a frame trickled byte by
byte, frames in pieces beyond the broker's budget, and the memory such frames cost. Real broker
processes, raw sockets."""

from __future__ import annotations

import contextlib
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamlet.rabbitmq import Code, Key
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.publish import publish_frame
from tests.support.brokers import BrokerProcess
from tests.support.raw import RawPeer

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]
MiB = 1 << 20


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return path


def _publisher(peer: RawPeer, stream: str) -> None:
    peer.request(f.Create(peer.next_corr(), stream), f.CreateResponse)
    declared = peer.request(f.DeclarePublisher(peer.next_corr(), 1, None, stream),
                            f.DeclarePublisherResponse)
    assert isinstance(declared, f.DeclarePublisherResponse) and declared.code == Code.OK


def test_frames_written_with_open_are_held_to_the_opened_limit(broker: BrokerProcess) -> None:
    """A client that writes Open and a 10 KB request together: the request was held to the
    8,192-byte pre-Open limit and the connection closed with code 14."""
    names = [f"s{i:03d}" + "x" * 196 for i in range(50)]  # a 10 KB Metadata request
    with RawPeer(broker.host, broker.port) as peer:
        tune = peer.authenticate()
        peer.send_raw(f.encode(tune) + f.encode(f.Open(10, "/")) + f.encode(f.Metadata(11, names)))
        opened = peer.recv_until(f.OpenResponse)
        assert isinstance(opened, f.OpenResponse) and opened.code == Code.OK
        meta = peer.recv_until(f.MetadataResponse)
        assert isinstance(meta, f.MetadataResponse) and meta.correlation_id == 11
        assert [s.code for s in meta.streams] == [Code.STREAM_DOES_NOT_EXIST] * 50


def test_the_frames_before_an_oversize_frame_are_answered(tmp_path: Path, broker_factory: Factory) -> None:
    b = broker_factory(config=_config(tmp_path, "[server]\nframe_limit = 1048576\n"))
    with RawPeer(b.host, b.port) as peer:
        peer.handshake()
        peer.send_raw(f.encode(f.Metadata(7, ["a"])) + f.encode(f.StreamStats(8, "b"))
                      + struct.pack(">I", 2 * MiB))
        meta = peer.recv()
        assert isinstance(meta, f.MetadataResponse) and meta.correlation_id == 7
        stats = peer.recv()
        assert isinstance(stats, f.StreamStatsResponse) and stats.correlation_id == 8
        close = peer.recv()
        assert isinstance(close, f.Close) and close.code == Code.FRAME_TOO_LARGE
        assert peer.closed()


@pytest.mark.parametrize("again", [f.Tune(8192, 0), f.Open(99, "/"), f.PeerProperties(99, {}),
                                   f.SaslHandshake(99)])
def test_handshake_commands_after_open_are_refused(shared_broker: BrokerProcess, again: f.Command) -> None:
    """A second Tune with frame_max 1 used to be taken, and broke every later frame."""
    with RawPeer(shared_broker.host, shared_broker.port) as peer:
        peer.handshake()
        peer.send(again)
        close = peer.recv_until(f.Close)
        assert isinstance(close, f.Close) and close.code == Code.UNKNOWN_FRAME
        assert peer.closed()
    with RawPeer(shared_broker.host, shared_broker.port) as bystander:
        bystander.handshake()


def test_a_frame_trickled_byte_by_byte_is_closed_at_its_deadline(
        tmp_path: Path, broker_factory: Factory) -> None:
    """Slowloris: any byte reset the heartbeat clock and an incomplete frame had no deadline."""
    b = broker_factory(config=_config(tmp_path, "[server]\nframe_timeout = 2\n"))
    frame = f.encode(f.Metadata(5, ["x" * 200]))
    with RawPeer(b.host, b.port) as peer:
        peer.handshake()
        peer.sock.settimeout(0.2)
        deadline = time.monotonic() + 60  # far past frame_timeout: the broker must act first
        closed = False
        for byte in frame[:-1]:  # never the last byte
            try:
                peer.send_raw(bytes([byte]))
                if peer.sock.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
            except (ConnectionResetError, BrokenPipeError):
                closed = True
                break
            assert time.monotonic() < deadline, "the trickling peer is still connected"
        assert closed, "the whole frame but its last byte was sent and the peer is still connected"
    assert "still incomplete after 2s" in b.log_text()
    with RawPeer(b.host, b.port) as bystander:
        bystander.handshake()


def test_frames_in_pieces_wait_for_the_broker_wide_budget(tmp_path: Path, broker_factory: Factory) -> None:
    """Two connections whose frames together pass limits.max_buffered_bytes: the second is not
    read until the first completes, then completes itself. Nothing is refused or lost."""
    b = broker_factory(config=_config(tmp_path, "[server]\nframe_max = 65536\nframe_limit = 1048576\n"
                                                "[limits]\nmax_buffered_bytes = 1048576\n"))
    first = publish_frame(1, [(1, b"a" * (900 << 10))])
    second = publish_frame(1, [(1, b"b" * (300 << 10))])
    with RawPeer(b.host, b.port) as a, RawPeer(b.host, b.port) as c:
        for peer, stream in ((a, "a"), (c, "c")):
            peer.handshake()
            _publisher(peer, stream)
        # A Metadata and the start of the big frame in one small write: once its answer is
        # back, the broker has read that write and reserved the big frame's whole length.
        a.send_raw(f.encode(f.Metadata(50, ["a"])) + first[:16])
        a.recv_until(f.MetadataResponse)
        c.send_raw(f.encode(f.Metadata(51, ["c"])) + second[:16])
        c.recv_until(f.MetadataResponse)
        c.send_raw(second[16:])  # all of it: the broker must not read it while A holds the budget
        c.sock.settimeout(1.0)
        with pytest.raises(TimeoutError):
            c.recv()  # nothing (no confirm) while the budget is A's
        c.sock.settimeout(30.0)
        a.send_raw(first[16:])
        for peer in (a, c):
            confirm = peer.recv_until(f.PublishConfirm)
            assert isinstance(confirm, f.PublishConfirm) and confirm.publishing_ids == [1]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_partial_frames_cost_at_most_the_budget_and_are_returned(
        tmp_path: Path, broker_factory: Factory) -> None:
    """100 connections each hold the first MiB of a 2 MiB frame. Before: +100 MiB, never given
    back after they closed (the broker's RSS stayed at its peak)."""
    b = broker_factory(config=_config(tmp_path, "[server]\nframe_limit = 2097152\n"
                                                "[limits]\nmax_buffered_bytes = 8388608\n"))
    peers = []
    try:
        for _ in range(100):
            peer = RawPeer(b.host, b.port)
            peers.append(peer)
            peer.handshake()
        start = b.rss_kib()
        head = struct.pack(">IHHI", 2 * MiB - 4, Key.PUBLISH, 1, 1)
        for peer in peers:
            peer.sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):  # what the socket takes of the first MiB
                peer.sock.send(head + b"x" * (MiB - len(head)))
        peak = b.settled_rss_kib()
        assert peak - start < 64 * 1024, f"partial frames grew the broker by {(peak - start) >> 10} MiB"
    finally:
        for peer in peers:
            peer.sock.close()
    after, deadline = b.settled_rss_kib(), time.monotonic() + 60
    while after - start >= 16 * 1024 and time.monotonic() < deadline:  # a starved broker
        after = b.settled_rss_kib()  # (cores shared with other tests) frees on its own time
    assert after - start < 16 * 1024, f"{(after - start) >> 10} MiB not returned after the peers closed"
