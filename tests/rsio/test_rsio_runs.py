"""streamlet.rsio.runs: a subscription's frames for a run of stored records, and an append's run
of onNext frames cut from a read. The C functions and their Python twins give the same results
(or both refuse) on tables, random input and input mutated anywhere; the frames decode to the
elements the entries hold, and the entries cut hold the elements the frames carried."""

from __future__ import annotations

import random
import struct

import pytest

from streamlet.rsio import Message, OnNext, OnNextPacked, Request, decode, encode, runs
from streamlet.rsio.codec import iter_frames

C_BUILT = runs._run_c is not None


def entries(bodies: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(b)) + b for b in bodies)


def both(sub: int, data: bytes, max_count: int, max_bytes: int, split: int,
         size: int) -> tuple[bytes, int, int] | str:
    """The Python result, checked equal to C's where it is built (a refusal: its class)."""
    def one(python: bool) -> tuple[bytes, int, int] | str:
        try:
            return runs.on_next_run(sub, data, max_count, max_bytes, split, size, python)
        except ValueError:
            return "ValueError"
    py = one(True)
    if C_BUILT:
        assert one(False) == py, (sub, data, max_count, max_bytes, split, size)
    return py


@pytest.mark.parametrize(("bodies", "limits", "size", "want"), [
    # each entry an onNext
    ([b"ab", b"c"], (10, 100, 64), 0, [OnNext(3, b"ab"), OnNext(3, b"c")]),
    # max_count
    ([b"ab", b"c"], (1, 100, 64), 0, [OnNext(3, b"ab")]),
    # max_bytes: the entry that reaches it is the last
    ([b"ab", b"cd", b"e"], (10, 3, 64), 0, [OnNext(3, b"ab"), OnNext(3, b"cd")]),
    # a body past split stops the run before it
    ([b"ab", b"cdef", b"g"], (10, 100, 3), 0, [OnNext(3, b"ab")]),
    ([b"abcd"], (10, 100, 3), 0, []),
    # packed: groups of split // size, a group of one an onNext
    ([b"aa", b"bb", b"cc"], (10, 100, 4), 2, [OnNextPacked(3, 2, b"aabb"), OnNext(3, b"cc")]),
    ([b"aa", b"bb", b"cc"], (10, 100, 64), 2, [OnNextPacked(3, 3, b"aabbcc")]),
    # a body of another size stops the run
    ([b"aa", b"b", b"cc"], (10, 100, 64), 2, [OnNext(3, b"aa")]),
    ([], (10, 100, 64), 0, []),
])
def test_frames_of_a_run(bodies: list[bytes], limits: tuple[int, int, int], size: int,
                         want: list[object]) -> None:
    data = entries(bodies)
    got = both(3, data, limits[0], limits[1], limits[2], size)
    assert not isinstance(got, str)
    frames, n, pos = got
    assert [decode(f) for f in _split(frames)] == want
    assert pos == len(entries(bodies[:n]))
    assert n == sum(m.count if isinstance(m, OnNextPacked) else 1 for m in want)  # type: ignore[attr-defined]


def _split(frames: bytes) -> list[bytes]:
    """The frames of ``frames``, raw (iter_frames decodes)."""
    buf, out = bytearray(frames), []
    while buf:
        before = bytes(buf)
        next(iter_frames(buf))
        out.append(before[: len(before) - len(buf)])
    return out


def test_a_sub_entry_batch_and_a_truncated_entry() -> None:
    data = entries([b"ab"]) + b"\x80" + b"\x00" * 12
    assert both(1, data, 10, 100, 64, 0) == (b"\x04\x07\x01ab", 1, 6)
    assert both(1, entries([b"ab"])[:-1], 10, 100, 64, 0) == "ValueError"
    assert both(1, b"\x00\x00", 10, 100, 64, 0) == "ValueError"
    assert both(1, b"", -1, 100, 64, 0) == "ValueError"
    assert both(-1, b"", 1, 100, 64, 0) == "ValueError"
    assert both(1, b"", 1, 100, 0, 0) == "ValueError"


def test_subscriber_ids_and_lengths_of_every_varint_size() -> None:
    for sub in (0, 127, 128, 16_383, 16_384, (1 << 64) - 1):
        for n in (0, 120, 200, 20_000):
            got = both(sub, entries([b"x" * n]), 1, 1 << 30, 1 << 20, 0)
            assert not isinstance(got, str)
            frames, k, _ = got
            assert k == 1 and decode(frames) == OnNext(sub, b"x" * n)


@pytest.mark.skipif(not C_BUILT, reason="the C module was not built here")
def test_c_and_python_agree_on_random_and_mutated_runs() -> None:
    rnd = random.Random(7)
    for _ in range(3_000):
        size = rnd.choice((0, 0, 1, 3, 8))
        bodies = [bytes(rnd.getrandbits(8) for _ in range(size or rnd.randrange(0, 40)))
                  for _ in range(rnd.randrange(0, 30))]
        data = bytearray(entries(bodies))
        if data and rnd.random() < 0.5:  # a byte changed, or the end cut off
            if rnd.random() < 0.5:
                data[rnd.randrange(len(data))] = rnd.getrandbits(8)
            else:
                del data[rnd.randrange(len(data)):]
        args = (rnd.randrange(0, 300), bytes(data), rnd.randrange(0, 40), rnd.randrange(1, 400),
                rnd.randrange(1, 64), size)
        both(*args)


def cut(data: bytes, sub: int, max_count: int, max_element: int) -> tuple[bytes, int, int] | str:
    """The Python cut, checked equal to C's where it is built (a refusal: its class)."""
    def one(python: bool) -> tuple[bytes, int, int] | str:
        try:
            return runs.cut_on_next(data, sub, max_count, max_element, python)
        except ValueError:
            return "ValueError"
    py = one(True)
    if C_BUILT:
        assert one(False) == py, (data, sub, max_count, max_element)
    return py


@pytest.mark.parametrize(("frames", "limits", "want"), [
    ([OnNext(5, b"ab"), OnNext(5, b""), OnNext(5, b"c")], (10, 100), [b"ab", b"", b"c"]),
    ([OnNext(5, b"ab"), OnNext(5, b"c")], (1, 100), [b"ab"]),  # max_count
    ([OnNext(5, b"ab"), OnNext(5, b"cde")], (10, 2), [b"ab"]),  # max_element
    ([OnNext(5, b"ab"), OnNext(6, b"c")], (10, 100), [b"ab"]),  # another subscriber
    ([OnNext(5, b"ab"), Request(5, 1)], (10, 100), [b"ab"]),  # another message
    ([OnNext(6, b"ab")], (10, 100), []),
])
def test_a_run_of_on_next_cut(frames: list[Message], limits: tuple[int, int],
                              want: list[bytes]) -> None:
    data = b"".join(map(encode, frames))
    got = cut(data, 5, limits[0], limits[1])
    assert got == (entries(want), len(want), sum(len(encode(f)) for f in frames[: len(want)]))


def test_a_frame_not_whole_and_varints_out_of_bounds() -> None:
    whole = encode(OnNext(300, b"xyz"))
    assert cut(whole + whole[:-1], 300, 10, 100) == (entries([b"xyz"]), 1, len(whole))
    assert cut(b"\x80" * 11, 1, 10, 100) == (b"", 0, 0)  # a length past 10 bytes
    assert cut(b"\x0c\x07" + b"\xff" * 9 + b"\x02", 1, 10, 100) == (b"", 0, 0)  # past 64 bits
    assert cut(b"\x00", 1, 10, 100) == (b"", 0, 0)  # an empty frame
    assert cut(b"", -1, 10, 100) == "ValueError"
    assert cut(b"", 1, -1, 100) == "ValueError"
    big = (1 << 64) - 1
    assert cut(encode(OnNext(big, b"q")), big, 10, 100) == (entries([b"q"]), 1, 13)


@pytest.mark.skipif(not C_BUILT, reason="the C module was not built here")
def test_c_and_python_cut_the_same_from_random_and_mutated_reads() -> None:
    rnd = random.Random(11)
    for _ in range(3_000):
        msgs: list[Message] = [OnNext(rnd.choice((1, 1, 1, 200)),
                                      bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(40))))
                               for _ in range(rnd.randrange(0, 20))]
        if rnd.random() < 0.2:
            msgs.insert(rnd.randrange(len(msgs) + 1), Request(1, 5))
        data = bytearray(b"".join(map(encode, msgs)))
        if data and rnd.random() < 0.5:
            if rnd.random() < 0.5:
                data[rnd.randrange(len(data))] = rnd.getrandbits(8)
            else:
                del data[rnd.randrange(len(data)):]
        cut(bytes(data), rnd.choice((1, 200)), rnd.randrange(0, 25), rnd.randrange(0, 50))
