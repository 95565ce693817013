"""streamlet's private replication commands (0x7E01-0x7E0C, 0x7E10-0x7E13): round trips, truncations, random
bodies, the chunks read as a view of the frame, and their error answers."""

from __future__ import annotations

import random
import struct

import pytest

from streamlet.rabbitmq import Code, Key
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.answers import error_answer
from streamlet.rabbitmq.constants import REPLICATION_KEYS, Role
from streamlet.rabbitmq.frames import replication as rf

CHUNK = b"\x50" + bytes(47) + b"data"  # the codec does not look inside

SAMPLES: list[f.Command] = [
    rf.ReplicaHello(1, "s", 4, 2, 3, 17, 1800),
    rf.ReplicaHello(1, "s", 1, 0, 0, -1, 0),  # an empty replica
    rf.ReplicaHelloResponse(1, Code.OK, 4, 0, [(1, 9), (3, 17), (4, 20)]),
    rf.ReplicaHelloResponse(1, Code.STREAM_NOT_AVAILABLE, 5),
    rf.ReplicaStart(2, 4, 3, 17, 1800), rf.ReplicaStartResponse(2, Code.OK),
    rf.ReplicaChunks(4, 17, CHUNK + CHUNK), rf.ReplicaChunks(4, -1, b""),
    rf.ReplicaAck(4, 20, 2100), rf.ReplicaAck(4, -1, 0),
    rf.ReplicaCommit(4, 20), rf.ReplicaCommit(4, -1),
    rf.Fence(3, "s", 5),
    rf.FenceResponse(3, Code.OK, 5, 4, 20, 2100, [(1, 9), (4, 20)]),
    rf.FenceResponse(3, Code.STREAM_NOT_AVAILABLE, 7),
    rf.Assign(4, "s", 5, Role.FOLLOWER, "streamlet-1.streamlet", 5552, [0, 1, 2]),
    rf.Assign(4, "s", 5, Role.LEADER, "", 0, [1]),
    rf.AssignResponse(4, Code.OK),
    rf.ReplicaContact(5, "s"),
    rf.ReplicaContactResponse(5, Code.OK, 5, Role.FOLLOWER, 120, 5, 30, 3100),
    rf.ReplicaContactResponse(5, Code.OK, 5, 0, -1),  # fenced, no link
    rf.ReplicaSeal(6, "s", 5, 1), rf.ReplicaSeal(6, "s", 5, 0),
    rf.ReplicaSealResponse(6, Code.OK, 5, 30, 3100), rf.ReplicaSealResponse(6, Code.STREAM_NOT_AVAILABLE),
    rf.ReplicaLearn(7, "s", 5, 3), rf.ReplicaLearnResponse(7, Code.OK),
    rf.ReplicaLeave(8, "s", 6), rf.ReplicaLeaveResponse(8, Code.STREAM_NOT_AVAILABLE),
    rf.SacJoin(5, "s", 5, 70000, "billing", 2), rf.SacJoin(5, "s", 5, 1, "g"),
    rf.SacJoinResponse(5, Code.STREAM_NOT_AVAILABLE),
    rf.SacLeave(70000), rf.SacUpdate(70000, 1), rf.SacUpdate(1, 0), rf.SacSteppedDown(70000),
    rf.PolicySync(9, b'[{"vhost": "/", "name": "p"}]'), rf.PolicySync(9, b"[]"),
    rf.PolicySyncResponse(9, Code.OK, b"[]"), rf.PolicySyncResponse(9, Code.ACCESS_REFUSED),
]


def test_every_replication_key_has_a_sample_and_is_private() -> None:
    keys = {cmd.KEY for cmd in SAMPLES}
    assert keys == {k for k in Key if k in REPLICATION_KEYS} == {*range(0x7E01, 0x7E0D), *range(0x7E10, 0x7E14)}
    assert all(k > 31 and k < 0x8000 for k in keys)  # clear of RabbitMQ's keys and the response bit


@pytest.mark.parametrize("cmd", SAMPLES, ids=lambda c: type(c).__name__)
def test_round_trip(cmd: f.Command) -> None:
    frame = f.encode(cmd)
    assert struct.unpack_from(">I", frame)[0] == len(frame) - 4
    assert f.decode(frame[4:]) == cmd


@pytest.mark.parametrize("cmd", SAMPLES, ids=lambda c: type(c).__name__)
def test_every_truncation_is_an_error_value(cmd: f.Command) -> None:
    body = f.encode(cmd)[4:]
    for cut in range(len(body)):
        out = f.decode(body[:cut])
        if isinstance(out, f.FrameError):
            assert out.code == Code.UNKNOWN_FRAME
        else:  # the chunks are the rest of the frame: cut after the head, fewer bytes of them
            assert isinstance(cmd, rf.ReplicaChunks) and cut >= 4 + 16
            assert isinstance(out, rf.ReplicaChunks) and bytes(out.chunks) == cmd.chunks[: cut - 20]


@pytest.mark.parametrize("cmd", [c for c in SAMPLES if not isinstance(c, rf.ReplicaChunks)],
                         ids=lambda c: type(c).__name__)
def test_trailing_bytes_are_refused(cmd: f.Command) -> None:
    out = f.decode(f.encode(cmd)[4:] + b"x")
    assert isinstance(out, f.FrameError) and out.code == Code.UNKNOWN_FRAME


@pytest.mark.parametrize("key", range(0x7E01, 0x7E0C))
def test_random_bodies_never_raise(key: int) -> None:
    rng = random.Random(key)
    for _ in range(2000):
        wire_key = key | (0x8000 if rng.random() < 0.5 else 0)
        body = struct.pack(">HH", wire_key, 1) + rng.randbytes(rng.randint(0, 60))
        out = f.decode(body)
        if isinstance(out, f.FrameError):
            assert out.code == Code.UNKNOWN_FRAME
        else:
            assert out.wire_key == wire_key


def test_chunks_are_a_view_of_the_frame() -> None:
    frame = bytearray(f.encode(rf.ReplicaChunks(4, 17, CHUNK))[4:])
    out = f.decode(memoryview(frame))
    assert isinstance(out, rf.ReplicaChunks) and isinstance(out.chunks, memoryview)
    frame[-1] = ord("X")  # no copy: the view sees the frame's bytes
    assert bytes(out.chunks) == CHUNK[:-1] + b"X"


def test_chunks_prefix_is_the_frame_head() -> None:
    whole = f.encode(rf.ReplicaChunks(4, 17, CHUNK))
    assert rf.ReplicaChunks.prefix(4, 17, len(CHUNK)) + CHUNK == whole
    assert rf.ReplicaChunks.prefix(4, -1, 0) == f.encode(rf.ReplicaChunks(4, -1, b""))


@pytest.mark.parametrize(("cmd", "corr"), [
    (rf.ReplicaChunks(4, 17, CHUNK), None), (rf.ReplicaAck(4, 20, 2100), None),
    (rf.ReplicaCommit(4, 20), None), (rf.Fence(3, "s", 5), 3), (rf.SacLeave(7), None),
    (rf.SacUpdate(7, 1), None), (rf.SacSteppedDown(7), None), (rf.SacJoin(6, "s", 5, 7, "g"), 6), (rf.ReplicaHello(1, "s", 4, 2, 3, 17, 1800), 1),
])
def test_correlation_ids_of_malformed_frames(cmd: f.Command, corr: int | None) -> None:
    """Commands without an answer have no correlation id: an error never answers them."""
    body = f.encode(cmd)[4:]
    out = f.decode(body[:12] if isinstance(cmd, rf.ReplicaChunks) else body[:-1])
    assert isinstance(out, f.FrameError) and out.correlation_id == corr


@pytest.mark.parametrize(("key", "expected"), [
    (Key.REPLICA_HELLO, rf.ReplicaHelloResponse(9, Code.STREAM_NOT_AVAILABLE)),
    (Key.REPLICA_START, rf.ReplicaStartResponse(9, Code.STREAM_NOT_AVAILABLE)),
    (Key.FENCE, rf.FenceResponse(9, Code.STREAM_NOT_AVAILABLE)),
    (Key.ASSIGN, rf.AssignResponse(9, Code.STREAM_NOT_AVAILABLE)),
])
def test_error_answers_decode_as_their_response(key: Key, expected: f.Command) -> None:
    frame = error_answer(key, 1, 9, Code.STREAM_NOT_AVAILABLE)
    assert f.decode(frame[4:]) == expected
