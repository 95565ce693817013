"""framing.ReadBuffer: reads land in an arena and frames are views of it. The frames are the
Splitter's, for any way the reads cut the bytes; held, pending and begun say what the
Splitter's say; no byte handed out is written again; only an incomplete frame's start is ever
copied."""

from __future__ import annotations

import random
import struct

import pytest

from streamlet.rabbitmq import FrameSplitter
from streamlet.wire.framing import ARENA_FIRST, ARENA_MAX, FrameTooLarge, ReadBuffer


def frames_of(sizes: list[int], rng: random.Random) -> list[bytes]:
    """RabbitMQ-protocol frames (a 4-byte size, then the frame) with random bodies."""
    return [struct.pack(">I", n) + rng.randbytes(n) for n in sizes]


def read_into(buf: ReadBuffer, data: memoryview, most: int) -> int:
    """What a socket read does: up to ``most`` bytes of ``data`` into the buffer's space."""
    room = buf.space()
    n = min(len(room), len(data), most)
    room[:n] = data[:n]
    return n


@pytest.mark.parametrize("seed", range(6))
def test_frames_come_out_whole_as_views_that_stay_as_they_were(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice((0, 1, 9, 300, 5000, 70_000, ARENA_MAX + 12345)) for _ in range(60)]
    sent = frames_of(sizes, rng)
    data = memoryview(b"".join(sent))
    buf, splitter = ReadBuffer(FrameSplitter(0)), FrameSplitter(0)
    got: list[memoryview] = []
    want: list[bytes] = []
    while data:
        n = read_into(buf, data, rng.choice((1, 3, 100, 4096, 65536, 1 << 20)))
        got += list(buf.filled(n))
        want += [bytes(x) for x in splitter.feed(data[:n])]
        data = data[n:]
        # the same state as the Splitter's after the same read
        assert (buf.held, buf.pending, buf.begun) == (splitter.held, splitter.pending,
                                                      splitter.begun)
    assert [bytes(x) for x in got] == want == [s[4:] for s in sent]  # held views: unchanged
    assert all(isinstance(x.obj, bytearray) for x in got)  # views of an arena, not copies
    assert (buf.held, buf.pending) == (0, 0)


def test_a_frame_read_whole_is_the_arena_it_was_read_into() -> None:
    buf = ReadBuffer(FrameSplitter(0))
    room = buf.space()
    frame = struct.pack(">I", 5) + b"hello"
    room[: len(frame)] = frame
    (got,) = list(buf.filled(len(frame)))
    assert got.obj is room.obj and bytes(got) == b"hello"
    assert len(buf.space()) == ARENA_FIRST - len(frame)  # the next read goes after it


def test_an_incomplete_frame_gets_an_arena_with_room_for_all_of_it() -> None:
    """Only its start is copied, once; the rest is read into place."""
    buf = ReadBuffer(FrameSplitter(0))
    frame = struct.pack(">I", 3 * ARENA_MAX) + bytes(3 * ARENA_MAX)
    n = read_into(buf, memoryview(frame), 1 << 30)
    assert n == ARENA_FIRST and list(buf.filled(n)) == []
    assert buf.pending == len(frame) and buf.held == n and buf.begun == 1
    room = buf.space()
    assert len(room) == len(frame) - n  # a new arena, the start copied to its front
    room[:] = frame[n:]
    (got,) = list(buf.filled(len(room)))
    assert got.obj is room.obj and len(got) == 3 * ARENA_MAX and buf.begun == 1


def test_arenas_grow_for_a_busy_connection_and_stay_small_for_a_quiet_one() -> None:
    quiet, busy = ReadBuffer(FrameSplitter(0)), ReadBuffer(FrameSplitter(0))
    small = struct.pack(">I", 10) + bytes(10)
    for _ in range(1000):
        room = quiet.space()
        room[: len(small)] = small
        assert len(list(quiet.filled(len(small)))) == 1
    big = struct.pack(">I", 100_000) + bytes(100_000)
    sizes = set()
    for _ in range(100):
        data = memoryview(big)
        while data:
            n = read_into(busy, data, 1 << 30)
            data = data[n:]
            list(busy.filled(n))
            sizes.add(len(busy._buf))
    assert len(quiet._buf) == ARENA_FIRST  # its 14,000 bytes fit the first arena
    assert max(sizes) == ARENA_MAX


def test_each_frame_is_held_to_the_limit_in_force_when_it_is_pulled() -> None:
    splitter = FrameSplitter(100)
    buf = ReadBuffer(splitter)
    data = struct.pack(">I", 4) + b"open" + struct.pack(">I", 500) + bytes(500) \
        + struct.pack(">I", 9000)
    frames = buf.filled(read_into(buf, memoryview(data), 1 << 20))
    assert bytes(next(frames)) == b"open"
    splitter.max_size = 1000  # what a handler does (Open raises the limit)
    assert bytes(next(frames)) == bytes(500)
    with pytest.raises(FrameTooLarge):  # the frames before an oversize one came out first
        next(frames)


def test_clear_drops_the_incomplete_frame() -> None:
    buf = ReadBuffer(FrameSplitter(0))
    assert list(buf.filled(read_into(buf, memoryview(struct.pack(">I", 50) + b"x"), 99))) == []
    assert (buf.held, buf.pending) == (5, 54)
    buf.clear()
    assert (buf.held, buf.pending) == (0, 0)
    frame = struct.pack(">I", 2) + b"ok"
    assert [bytes(x) for x in buf.filled(read_into(buf, memoryview(frame), 99))] == [b"ok"]


def test_frames_are_read_only_views() -> None:
    """No handler can write into the arena."""
    buf = ReadBuffer(FrameSplitter(0))
    (got,) = list(buf.filled(read_into(buf, memoryview(struct.pack(">I", 2) + b"ok"), 99)))
    assert got.readonly and got == b"ok"


def test_a_handler_may_take_whole_frames_ahead_itself() -> None:
    """``ahead`` is what the read holds after the frame handed out; what ``skip`` takes of it is
    not handed out again, and an incomplete frame after it is held as any other."""
    buf = ReadBuffer(FrameSplitter(0))
    frames = [struct.pack(">I", 2) + b"f%d" % i for i in range(4)]
    data = b"".join(frames) + struct.pack(">I", 9) + b"part"
    got = []
    it = buf.filled(read_into(buf, memoryview(data), 999))
    assert bytes(buf.ahead()) == data  # before the first frame: the whole read
    for frame in it:
        got.append(bytes(frame))
        if frame == b"f0":
            assert bytes(buf.ahead()) == data[6:]
            buf.skip(12)  # f1 and f2, taken by the handler
    assert got == [b"f0", b"f3"]
    assert (buf.held, buf.pending) == (8, 13)
    assert bytes(buf.ahead()) == b""  # outside a read
