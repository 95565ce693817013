"""Deliver from the segment file: what a client receives is, chunk for chunk, the stored header
and data as the segment files hold them (bloom filter left out), whichever way the broker sent
it (sendfile for a big chunk over plain TCP, its rest after a full socket too; read for small
chunks, under TLS, and for a bloom filter): plain and filtered chunks, a filter, credit one at
a time, Deliver v1 and v2, a slow reader, small segments, recovered chunks, a follower, TLS,
and retention deleting segments under a reader."""

from __future__ import annotations

import asyncio
import fcntl
import socket
import ssl
import struct
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

from streamlet.client import connect
from streamlet.core.filtering import Matcher
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import Key
from streamlet.storage import chunk
from streamlet.storage.layout import FILE_HEADER_SIZE
from tests.broker.test_replication import _stream_on_members
from tests.support.brokers import BrokerProcess, free_port
from tests.support.raw import RawPeer
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]


def stored_chunks(b: BrokerProcess, stream: str) -> list[bytes]:
    """Every user chunk in the stream's segment files, as a Deliver carries it: the header and
    the data, the bloom filter between them left out."""
    out: list[bytes] = []
    for path in sorted((b.data_dir / "streams" / stream).glob("*.segment")):
        raw = path.read_bytes()
        pos = FILE_HEADER_SIZE
        while pos + chunk.HEADER_SIZE <= len(raw):
            h = chunk.ChunkHeader.unpack(raw[pos : pos + chunk.HEADER_SIZE])
            if h.chunk_type == chunk.CHUNK_USER:
                data = pos + chunk.HEADER_SIZE + h.bloom_size
                out.append(raw[pos : pos + chunk.HEADER_SIZE] + raw[data : data + h.data_length])
            pos += h.size
    return out


def publish(b: BrokerProcess, stream: str, chunks: int, per_chunk: int, size: int = 100,
            values: list[str | None] | None = None, first: int = 1) -> None:
    """``chunks`` Publish frames of ``per_chunk`` messages, each confirmed before the next (a
    chunk each); ``values``: the frames' filter values in turn (Publish v2), None for none."""
    with RawPeer(b.host, b.port) as peer:
        peer.handshake()
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, None, stream),
                     f.DeclarePublisherResponse)
        pid = first
        for i in range(chunks):
            value = values[i % len(values)] if values else None
            msgs = [f.PublishedMessage.simple(pid + k, b"%08d" % (pid + k) + b"x" * (size - 8),
                                              value) for k in range(per_chunk)]
            peer.send(f.Publish(1, msgs, version=2 if values else 1))
            pid += per_chunk
            while True:
                got = peer.recv_until(f.PublishConfirm)
                assert isinstance(got, f.PublishConfirm)
                if got.publishing_ids[-1] == pid - 1:
                    break


def deliveries(b: BrokerProcess, stream: str, until: int, *, port: int | None = None,
               credit: int = 100, step: int | None = None, v2: bool = False,
               properties: dict[str, str] | None = None,
               context: ssl.SSLContext | None = None,
               slow: bool = False) -> list[tuple[bytes, int | None]]:
    """Subscribe from the first offset and read Deliver frames (chunk, committed chunk id in v2)
    until one ends at or past offset ``until``; ``step``: credit given back one frame at a time,
    this much each time (none: ``credit`` covers them all); ``slow``: a small receive buffer,
    and nothing read until the broker has filled it (its socket full, the rest waits)."""
    peer = RawPeer(b.host, port or b.port)
    if slow:
        peer.sock.close()
        peer.sock = socket.socket()
        peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        peer.sock.settimeout(30)
        peer.sock.connect((b.host, port or b.port))
    if context is not None:
        peer.sock = context.wrap_socket(peer.sock, server_hostname="localhost")
    with peer:
        peer.handshake()
        if v2:
            peer.request(f.ExchangeCommandVersions(
                peer.next_corr(), [f.CommandVersion(Key.DELIVER, 1, 2)]),
                f.ExchangeCommandVersionsResponse)
        answer = peer.request(f.Subscribe(peer.next_corr(), 1, stream, 1, 0, credit,
                                          properties or {}), f.SubscribeResponse)
        assert isinstance(answer, f.SubscribeResponse) and answer.code == Code.OK
        if slow:
            asyncio.run(eventually(lambda: _unread(peer.sock) >= 4096, timeout=30,
                                   what="the receive buffer full"))
        got: list[tuple[bytes, int | None]] = []
        while True:
            frame = peer.recv_frame()
            assert frame is not None, "the broker closed the connection"
            key, version = struct.unpack_from(">HH", frame)
            if key != Key.DELIVER:
                continue
            assert version == (2 if v2 else 1)
            committed = struct.unpack_from(">Q", frame, 5)[0] if v2 else None
            body = frame[13:] if v2 else frame[5:]
            got.append((body, committed))
            h = chunk.ChunkHeader.unpack(body[: chunk.HEADER_SIZE])
            assert len(body) == chunk.HEADER_SIZE + h.data_length
            if h.chunk_id + h.num_records >= until:
                return got
            if step is not None:
                peer.send(f.Credit(1, step))


def _end(chunks: list[bytes]) -> int:
    h = chunk.ChunkHeader.unpack(chunks[-1][: chunk.HEADER_SIZE])
    return h.chunk_id + h.num_records


def _create(b: BrokerProcess, stream: str, args: dict[str, str] | None = None) -> None:
    async def run() -> None:
        async with await connect(b.host, b.port) as c:
            await c.create_stream(stream, args or {})
    asyncio.run(run())


def _blooms(b: BrokerProcess, stream: str) -> dict[bytes, bytes]:
    """The stored bloom filter of each user chunk (b"": none), by the chunk's header."""
    out: dict[bytes, bytes] = {}
    for path in sorted((b.data_dir / "streams" / stream).glob("*.segment")):
        raw = path.read_bytes()
        pos = FILE_HEADER_SIZE
        while pos + chunk.HEADER_SIZE <= len(raw):
            h = chunk.ChunkHeader.unpack(raw[pos : pos + chunk.HEADER_SIZE])
            at = pos + chunk.HEADER_SIZE
            out[raw[pos:at]] = raw[at : at + h.bloom_size]
            pos += h.size
    return out


def _mixed(b: BrokerProcess, stream: str) -> list[bytes]:
    """Chunks without a bloom filter (big ones, sent with sendfile, and small ones, read
    together), with one (three filter values in turn, one of them none), and big ones
    again; returns them as stored."""
    publish(b, stream, 6, 80, size=1000)
    publish(b, stream, 6, 40, first=481)
    publish(b, stream, 12, 40, values=["eu", "us", None], first=721)
    publish(b, stream, 6, 80, size=1000, first=1201)
    stored = stored_chunks(b, stream)
    assert len(stored) >= 30  # (a frame may be stored as two chunks)
    assert sum(1 for c in stored if len(c) >= 64 << 10) >= 4, "chunks sent with sendfile"
    assert sum(1 for c in stored if len(c) < 64 << 10) >= 18, "chunks read"
    assert sum(1 for bloom in _blooms(b, stream).values() if bloom) == 8
    return stored


def test_plain_and_filtered_chunks_v1_v2_credit_one_and_a_filter(
        shared_broker: BrokerProcess) -> None:
    b = shared_broker
    _create(b, "mixed")
    stored = _mixed(b, "mixed")
    end = _end(stored)
    got = deliveries(b, "mixed", end)
    assert [c for c, _ in got] == stored, "Deliver v1, credit ahead"
    assert all(committed is None for _, committed in got)
    got = deliveries(b, "mixed", end, credit=1, step=1, v2=True)
    assert [c for c, _ in got] == stored, "Deliver v2, credit one chunk at a time"
    assert all(committed is not None and committed >= chunk.ChunkHeader.unpack(c[:48]).chunk_id
               for c, committed in got)
    # A filtering subscription gets the chunks whose bloom may hold "eu", nothing else.
    blooms = _blooms(b, "mixed")
    matcher = Matcher(["eu"], match_unfiltered=False)
    eu = [c for c in stored if matcher.matches(blooms[c[:48]])]
    assert 4 <= len(eu) < len(stored)
    filtered = deliveries(b, "mixed", _end(eu), credit=1, step=1, v2=True,
                          properties={"filter.0": "eu"})
    assert [c for c, _ in filtered] == eu
    # A reader whose socket fills: the rest of a chunk goes from the file once it takes more.
    publish(b, "mixed", 30, 80, size=1000, first=1681)
    stored = stored_chunks(b, "mixed")
    assert [c for c, _ in deliveries(b, "mixed", _end(stored), credit=200, slow=True)] == stored


def test_a_slow_reader_that_publishes_too(
        shared_broker: BrokerProcess) -> None:
    """A slow reader that also publishes while its chunks go from the file with pauses (the
    socket full): every frame comes whole, the confirm among them. (The order of a write
    made while a chunk's rest waits: tests/broker/test_send_file.py.)"""
    b = shared_broker
    _create(b, "both")
    publish(b, "both", 20, 80, size=1000)
    stored = stored_chunks(b, "both")
    peer = RawPeer(b.host, b.port)
    peer.sock.close()
    peer.sock = socket.socket()
    peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peer.sock.settimeout(30)
    peer.sock.connect((b.host, b.port))
    with peer:
        peer.handshake()
        peer.request(f.DeclarePublisher(peer.next_corr(), 1, None, "both"),
                     f.DeclarePublisherResponse)
        peer.send(f.Subscribe(peer.next_corr(), 1, "both", 1, 0, 100))
        asyncio.run(eventually(lambda: _unread(peer.sock) >= 4096, timeout=30,
                               what="the receive buffer full"))
        peer.send(f.Publish(1, [f.PublishedMessage.simple(1001, b"late")]))
        got: list[bytes] = []
        confirmed = False
        while len(got) < len(stored) or not confirmed:
            frame = peer.recv_frame()
            assert frame is not None, "the broker closed the connection"
            key = struct.unpack_from(">H", frame)[0]
            if key == Key.DELIVER:
                got.append(frame[5:])
            elif key == Key.PUBLISH_CONFIRM:
                confirmed = True
    assert got[: len(stored)] == stored


def test_small_segments_and_recovered_chunks(broker_factory: Factory) -> None:
    b = broker_factory()
    _create(b, "small", {"stream-max-segment-size-bytes": "100000"})
    stored = _mixed(b, "small")
    assert len(list((b.data_dir / "streams" / "small").glob("*.segment"))) >= 6
    assert [c for c, _ in deliveries(b, "small", _end(stored), credit=3, step=1)] == stored
    b.restart()  # the chunks recovered at start: their headers not read until a reader needs them
    assert stored_chunks(b, "small") == stored
    assert [c for c, _ in deliveries(b, "small", _end(stored), credit=1, step=1)] == stored
    assert [c for c, _ in deliveries(b, "small", _end(stored), v2=True)] == stored


def test_tls(broker_factory: Factory, tmp_path: Path, certs: Path) -> None:
    tls_port = free_port()
    config = tmp_path / "tls.toml"
    config.write_text(f"""
[tls]
port = {tls_port}
certfile = "{certs / 'server.crt'}"
keyfile = "{certs / 'server.key'}"
cafile = "{certs / 'ca.crt'}"
verify_peer = false
""")
    b = broker_factory(config=config)
    _create(b, "tls")
    stored = _mixed(b, "tls")
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    for credit, step in ((100, None), (1, 1)):
        got = deliveries(b, "tls", _end(stored), port=tls_port, credit=credit, step=step,
                         context=context)
        assert [c for c, _ in got] == stored
    assert [c for c, _ in deliveries(b, "tls", _end(stored))] == stored  # its plain port too


def test_a_follower_delivers_what_it_copied(tmp_path: Path, broker_factory: Factory) -> None:
    brokers = asyncio.run(_stream_on_members("fol", tmp_path, broker_factory))
    leader, follower = brokers[0], brokers[1]
    stored = _mixed(leader, "fol")

    async def copied() -> bool:
        return stored_chunks(follower, "fol") == stored

    asyncio.run(eventually(copied, timeout=30, what="the follower's copy"))
    for v2, step in ((False, None), (True, 1)):
        got = deliveries(follower, "fol", _end(stored), credit=1 if step else 100, step=step,
                         v2=v2)
        assert [c for c, _ in got] == stored


def test_retention_deletes_segments_under_a_reader(broker_factory: Factory) -> None:
    """The reader holds credit for one chunk while retention deletes the segments it was to
    read next: it goes on from the first chunk still stored, every chunk whole."""
    b = broker_factory()
    _create(b, "ret", {"stream-max-segment-size-bytes": "100000",
                       "max-length-bytes": "400000"})
    publish(b, "ret", 5, 70, size=1000)
    peer = RawPeer(b.host, b.port)
    with peer:
        peer.handshake()
        peer.request(f.Subscribe(peer.next_corr(), 1, "ret", 1, 0, 1), f.SubscribeResponse)
        first = _next_chunk(peer)
        assert chunk.ChunkHeader.unpack(first[:48]).chunk_id == 0
        publish(b, "ret", 30, 70, size=1000, first=351)  # a roll drops the oldest past 400 KB
        segments = sorted((b.data_dir / "streams" / "ret").glob("*.segment"))
        assert int(segments[0].stem) > 1000, "retention deleted the reader's next segments"
        stored = stored_chunks(b, "ret")
        end = _end(stored)
        got: list[bytes] = []
        last = 0
        while last < end:
            peer.send(f.Credit(1, 1))
            got.append(_next_chunk(peer))
            h = chunk.ChunkHeader.unpack(got[-1][:48])
            last = h.chunk_id + h.num_records
    ids = [chunk.ChunkHeader.unpack(c[:48]).chunk_id for c in got]
    assert ids == sorted(set(ids)) and ids[0] > 1000, "on from a chunk still stored, in order"
    for c in got:  # whole and right: each record is its own offset + 1, as published
        h = chunk.ChunkHeader.unpack(c[:48])
        data = c[48:]
        assert chunk.crc32(data) == h.data_crc
        records = [bytes(r) for r in chunk.iter_records(data)]
        assert [int(r[:8]) for r in records] == list(range(h.chunk_id + 1, h.next_offset + 1))
    assert got[-len(stored):] == stored


def _next_chunk(peer: RawPeer) -> bytes:
    while True:
        frame = peer.recv_frame()
        assert frame is not None, "the broker closed the connection"
        if struct.unpack_from(">H", frame)[0] == Key.DELIVER:
            return frame[5:]


def _unread(sock: socket.socket) -> int:
    """Bytes received on ``sock`` and not read yet."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
