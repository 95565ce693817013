"""Hardening: names whose quoted form is too long for a directory, super stream
records that name an impossible partition, and error answers the codec can read."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from streamlet.client import StreamletError, connect
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.frames import replication as rf
from tests.support.brokers import BrokerProcess
from tests.support.raw import RawPeer
from tests.support.reading import stream_bodies
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

#: at most 255 bytes each, but more than 255 once URL-quoted
LONG_NAMES = ["/" * 100, "é" * 127, "%" * 86]


async def _round_trip(b: BrokerProcess, stream: str, bodies: list[bytes]) -> None:
    async with await connect(b.host, b.port) as c:
        producer = await c.producer(stream)
        for body in bodies:
            await producer.send(body)
        await producer.flush()
        assert await stream_bodies(b, stream, len(bodies)) == bodies


async def test_streams_with_names_too_long_to_quote_are_created_and_survive_a_restart(
        broker: BrokerProcess) -> None:
    for i, name in enumerate(LONG_NAMES):
        async with await connect(broker.host, broker.port) as c:
            await c.create_stream(name)  # raises unless the answer is OK
            assert await c.stream_exists(name)
        await _round_trip(broker, name, [b"s%d-%d" % (i, j) for j in range(3)])
    broker.restart()
    for i, name in enumerate(LONG_NAMES):
        async with await connect(broker.host, broker.port) as c:
            assert await c.stream_exists(name)
        bodies = [b"s%d-%d" % (i, j) for j in range(3)]
        assert await stream_bodies(broker, name, len(bodies)) == bodies


async def test_super_streams_with_long_partition_names_survive_a_restart(broker: BrokerProcess) -> None:
    async with await connect(broker.host, broker.port) as c:
        await c.create_super_stream("long-ss", LONG_NAMES, ["a", "b", "c"])
        assert await c.partitions("long-ss") == LONG_NAMES
    for name in LONG_NAMES:
        await _round_trip(broker, name, [name.encode()[:10]])
    broker.restart()
    async with await connect(broker.host, broker.port) as c:
        assert await c.partitions("long-ss") == LONG_NAMES
        assert await c.route("b", "long-ss") == [LONG_NAMES[1]]
    for name in LONG_NAMES:
        assert await stream_bodies(broker, name, 1) == [name.encode()[:10]]


async def test_a_super_stream_naming_an_impossible_partition_does_not_stop_the_start(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory()
    async with await connect(b.host, b.port) as c:
        await c.create_super_stream("fine-ss", ["fine-ss-0"], ["0"])
    b.stop()
    # as an older streamlet left it: a record written, its partitions never created; one of
    # them cannot be (a file is where its directory would go)
    path = b.data_dir / "superstreams.json"
    doc = json.loads(path.read_text())
    doc["broken-ss"] = {"partitions": ["broken-ss-0", "broken-ss-1"], "binding_keys": ["0", "1"],
                        "arguments": {}}
    path.write_text(json.dumps(doc))
    (b.data_dir / "streams" / "broken-ss-0").write_text("in the way")
    b.start()
    async with await connect(b.host, b.port) as c:
        assert await c.partitions("fine-ss") == ["fine-ss-0"]
        assert await c.stream_exists("broken-ss-1")  # the one that could be made was
        assert not await c.stream_exists("broken-ss-0")
    await eventually(lambda: "cannot create partition 'broken-ss-0'" in b.log_text(),
                     what="the error logged")
    assert b.alive()


async def test_a_super_stream_whose_partition_cannot_be_created_is_not_recorded(
        broker: BrokerProcess) -> None:
    (broker.data_dir / "streams" / "blocked-ss-1").write_text("in the way")
    async with await connect(broker.host, broker.port) as c:
        with pytest.raises(StreamletError) as e:
            await c.create_super_stream("blocked-ss", ["blocked-ss-0", "blocked-ss-1"], ["0", "1"])
        assert e.value.code == Code.INTERNAL_ERROR
        assert not await c.stream_exists("blocked-ss-0")  # rolled back
        with pytest.raises(StreamletError) as e:
            await c.partitions("blocked-ss")
        assert e.value.code == Code.STREAM_DOES_NOT_EXIST
    record = broker.data_dir / "superstreams.json"
    assert not record.exists() or "blocked-ss" not in record.read_text()
    broker.restart()
    async with await connect(broker.host, broker.port) as c:
        assert not await c.stream_exists("blocked-ss-0")


# --- Delete removes the files before it answers, and says when it cannot --------------------


def _stream_dir(b: BrokerProcess, name: str) -> Path:
    return b.data_dir / "streams" / name


async def test_delete_answers_after_the_files_are_gone(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    # On asyncio's own loop (uvloop hidden): it sends an answer at once, where uvloop holds
    # writes until the callback returns, which would hide an answer sent before the removal.
    shim = tmp_path / "no-uvloop"
    shim.mkdir()
    (shim / "uvloop.py").write_text("raise ImportError('hidden by the test')\n")
    broker = broker_factory(env={"PYTHONPATH": str(shim)})
    name = "del-files"
    async with await connect(broker.host, broker.port) as c:
        await c.create_stream(name)
        await _round_trip(broker, name, [b"x"])
    # many files: a removal long enough (tenths of a second) to be seen racing the answer
    extra = _stream_dir(broker, name) / "extra"
    extra.mkdir()
    for i in range(20_000):
        (extra / str(i)).touch()
    with RawPeer(broker.host, broker.port) as peer:
        peer.handshake()
        answer = peer.request(f.Delete(peer.next_corr(), name), f.DeleteResponse)
        assert isinstance(answer, f.DeleteResponse) and answer.code == Code.OK
        assert not _stream_dir(broker, name).exists()


def _immutable(path: Path, on: bool) -> bool:
    """chattr +i / -i: a file even root cannot remove (needs root and ext4 or alike)."""
    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    return done.returncode == 0


async def test_a_failed_removal_is_logged_and_never_brings_the_stream_back(
        broker: BrokerProcess) -> None:
    name = "del-stuck"
    async with await connect(broker.host, broker.port) as c:
        await c.create_stream(name)
        producer = await c.producer(name)
        await producer.send(b"before")
        await producer.flush()
    stuck = _stream_dir(broker, name) / "busy" / "file"
    stuck.parent.mkdir()
    stuck.write_text("cannot be removed")
    if not _immutable(stuck, True):
        pytest.skip("chattr +i is not available here (needs root on ext4 or alike)")
    try:
        async with await connect(broker.host, broker.port) as c:
            await c.delete_stream(name)  # the stream is gone: stream.json went first
            assert not await c.stream_exists(name)
        await eventually(lambda: f"could not remove {_stream_dir(broker, name)}" in broker.log_text(),
                         what="the failed removal logged")
        assert not (_stream_dir(broker, name) / "stream.json").exists()
        broker.restart()  # the leftover is not a stream, and its removal fails again, logged
        async with await connect(broker.host, broker.port) as c:
            assert not await c.stream_exists(name)
        await eventually(lambda: broker.log_text().count(
            f"could not remove {_stream_dir(broker, name)}") >= 2, what="the retry at start logged")
    finally:
        _immutable(stuck, False)
    broker.restart()  # now the leftover goes
    assert not _stream_dir(broker, name).exists()
    async with await connect(broker.host, broker.port) as c:
        assert not await c.stream_exists(name)
        await c.create_stream(name)
        await _round_trip(broker, name, [b"after"])  # a new, empty stream


async def test_create_removes_a_leftover_directory_first(broker: BrokerProcess) -> None:
    leftover = _stream_dir(broker, "del-leftover")
    leftover.mkdir()
    (leftover / "00000000000000000000.segment").write_bytes(b"stale")
    async with await connect(broker.host, broker.port) as c:
        assert not await c.stream_exists("del-leftover")
        await c.create_stream("del-leftover")
        await _round_trip(broker, "del-leftover", [b"fresh"])


# --- error answers in each command's own response layout ------------------------------------

_REQUESTS: list[tuple[Callable[[int], f.Command], type[f.Command]]] = [
    (lambda c: f.Metadata(c, ["m-a", "m-b"]), f.MetadataResponse),
    (lambda c: f.QueryOffset(c, "ref", "s"), f.QueryOffsetResponse),
    (lambda c: f.QueryPublisherSequence(c, "ref", "s"), f.QueryPublisherSequenceResponse),
    (lambda c: f.ExchangeCommandVersions(c, [f.CommandVersion(2, 1, 2)]),
     f.ExchangeCommandVersionsResponse),
    (lambda c: f.Route(c, "k", "ss"), f.RouteResponse),
    (lambda c: f.Partitions(c, "ss"), f.PartitionsResponse),
    (lambda c: f.StreamStats(c, "s"), f.StreamStatsResponse),
    (lambda c: f.ResolveOffsetSpec(c, "s", 1, 0), f.ResolveOffsetSpecResponse),
    (lambda c: rf.Fence(c, "s", 1), rf.FenceResponse),
    (lambda c: rf.ReplicaHello(c, "s", 1, 1, 0, -1, 0), rf.ReplicaHelloResponse),
    (lambda c: rf.ReplicaContact(c, "s"), rf.ReplicaContactResponse),
    (lambda c: rf.ReplicaSeal(c, "s", 1, 1), rf.ReplicaSealResponse),
    (lambda c: rf.ReplicaLearn(c, "s", 1, 1), rf.ReplicaLearnResponse),
    (lambda c: rf.ReplicaLeave(c, "s", 1), rf.ReplicaLeaveResponse),
]


def _answer_code(answer: f.Command) -> int:
    if isinstance(answer, f.MetadataResponse):  # no top-level code: each stream has its own
        codes = {s.code for s in answer.streams}
        assert answer.brokers == [] and len(codes) <= 1
        return codes.pop() if codes else -1
    return int(answer.code)  # type: ignore[attr-defined]


def test_error_answers_before_open_decode_as_their_response(shared_broker: BrokerProcess) -> None:
    for make, response in _REQUESTS:
        with RawPeer(shared_broker.host, shared_broker.port) as peer:
            peer.send(make(41))
            answer = peer.recv()
            assert isinstance(answer, response), (response.__name__, answer)
            assert answer.correlation_id == 41  # type: ignore[attr-defined]
            assert _answer_code(answer) == Code.ACCESS_REFUSED, answer
            if isinstance(answer, f.MetadataResponse):
                assert [s.stream for s in answer.streams] == ["m-a", "m-b"]
            close = peer.recv()
            assert isinstance(close, f.Close) and close.code == Code.ACCESS_REFUSED
            assert peer.closed()


def test_error_answers_to_malformed_requests_decode_as_their_response(
        shared_broker: BrokerProcess) -> None:
    for make, response in _REQUESTS:
        key = make(0).wire_key
        with RawPeer(shared_broker.host, shared_broker.port) as peer:
            peer.handshake()
            body = struct.pack(">HHI", key, 1, 42) + b"\x00\x64ab"  # a string cut short
            peer.send_raw(struct.pack(">I", len(body)) + body)
            answer = peer.recv()
            assert isinstance(answer, response), (response.__name__, answer)
            assert answer.correlation_id == 42  # type: ignore[attr-defined]
            expected = -1 if response is f.MetadataResponse else Code.UNKNOWN_FRAME  # no streams
            assert _answer_code(answer) == expected, answer
            close = peer.recv()
            assert isinstance(close, f.Close) and close.code == Code.UNKNOWN_FRAME
            assert peer.closed()
