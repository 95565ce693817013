"""storage.entries.cut_simple, in C and in Python: the same cut of random chunks (simple entries,
a sub-entry batch where the general reader takes over, truncations), and the read rule it
implements (skip before ``start``, stop within ``max_bytes``, the first entry always taken)."""

from __future__ import annotations

import random
import struct
from array import array

import pytest

from streamlet.storage import entries
from streamlet.storage.chunk import ChunkError, simple_entry
from streamlet.storage.entries import BATCH, END, FULL, cut_simple, join_simple

SUB_BATCH = struct.pack(">BHII", 0x80, 2, 9, 9) + b"x" * 9  # two records, uncompressed


def _chunk(rng: random.Random) -> bytes:
    parts = [simple_entry(rng.randbytes(rng.choice((0, 1, 5, 100, rng.randrange(3000)))))
             for _ in range(rng.randrange(0, 12))]
    if parts and rng.random() < 0.3:
        parts.insert(rng.randrange(len(parts)), SUB_BATCH)
    return b"".join(parts)


def test_c_and_python_cut_alike() -> None:
    if entries._cut_c is None:
        pytest.skip("the C accelerator was not built (no compiler at install time)")
    rng = random.Random(4)
    errors = 0
    for _ in range(4000):
        data = bytearray(_chunk(rng))
        if data and rng.random() < 0.15:
            del data[rng.randrange(len(data)):]  # truncated
        args = (bytes(data), 10, 10 + rng.randrange(-2, 6), rng.choice((0, 50, 1000, 1 << 30)),
                rng.choice((0, 40)), rng.random() < 0.5, rng.random() < 0.5)
        try:
            want = cut_simple(*args, python=True)
        except ChunkError as e:
            with pytest.raises(ChunkError, match=str(e)):
                cut_simple(*args)
            errors += 1
            continue
        assert cut_simple(*args) == want
    assert errors > 50  # the truncations reach the checks


@pytest.mark.parametrize("python", [True, False])
def test_unjoined_entries_are_a_view_of_the_chunk(python: bool) -> None:
    """join=False (SBP's length-prefixed FETCH): the entries taken as stored, not copied."""
    data = b"".join(simple_entry(bytes([i]) * (10 + i)) for i in range(6))
    mv = memoryview(data)
    cut = cut_simple(mv, 100, 101, 25, join=False, python=python)  # 11 + 12 B: 101 and 102
    assert (cut.first, cut.n, cut.lengths, cut.size) == (101, 2, b"", 23)
    assert bytes(cut.bodies) == simple_entry(bytes([1]) * 11) + simple_entry(bytes([2]) * 12)
    assert isinstance(cut.bodies, memoryview) and cut.bodies.obj is data
    none = cut_simple(mv, 100, 200, 25, join=False, python=python)
    assert (none.n, bytes(none.bodies)) == (0, b"")


@pytest.mark.parametrize("python", [True, False])
def test_the_read_rule(python: bool) -> None:
    data = b"".join(simple_entry(b"a" * n) for n in (10, 20, 30, 40))
    cut = cut_simple(data, 100, 101, 55, python=python)  # skips 100, takes 101 and 102 (50 B)
    assert (cut.first, cut.n, cut.bodies, cut.size, cut.stop) == (
        101, 2, b"a" * 50, 50, FULL)
    assert array("i", cut.lengths).tolist() == [20, 30]
    big = cut_simple(data, 100, 103, 5, python=python)  # the first entry of a read: always
    assert (big.first, big.n, big.size, big.stop) == (103, 1, 40, END)
    after = cut_simple(data, 100, 103, 5, size=10, taken=True, python=python)  # not the first
    assert (after.first, after.n, after.stop) == (-1, 0, FULL)
    none = cut_simple(data, 100, 200, 1000, python=python)
    assert (none.first, none.n, none.bodies, none.stop, none.offset) == (-1, 0, b"", END, 104)
    mixed = cut_simple(simple_entry(b"z") + SUB_BATCH + simple_entry(b"y"), 0, 0, 100,
                       python=python)
    assert (mixed.n, mixed.bodies, mixed.stop, mixed.pos, mixed.offset) == (
        1, b"z", BATCH, 5, 1)


@pytest.mark.parametrize("python", [True, False])
def test_join_simple(python: bool) -> None:
    assert join_simple(b"abcdef", [1, 0, 5], python=python) == (
        simple_entry(b"a") + simple_entry(b"") + simple_entry(b"bcdef"))
    assert join_simple(b"", [], python=python) == b""
    for lengths in ([1, 2], [7], [-1, 7], [3, 3, 1]):  # not adding up to the payload: refused
        with pytest.raises(ChunkError):
            join_simple(b"abcdef", lengths, python=python)
    data = join_simple(b"x" * 300, [100, 200], python=python)
    cut = cut_simple(data, 0, 0, 1 << 20, python=python)  # the way back
    assert (cut.n, cut.bodies, array("i", cut.lengths).tolist()) == (2, b"x" * 300, [100, 200])


@pytest.mark.parametrize("python", [True, False])
def test_join_simple_takes_packed_lengths(python: bool) -> None:
    """Lengths as little-endian int32s (a FlatBuffers [int] as SBP's APPEND carries it) join
    as the list does, and are refused alike."""
    def packed(lengths: list[int]) -> memoryview:
        return memoryview(struct.pack(f"<{len(lengths)}i", *lengths))

    assert join_simple(b"abcdef", packed([1, 0, 5]), python=python) == join_simple(
        b"abcdef", [1, 0, 5], python=python)
    assert join_simple(b"", b"", python=python) == b""
    for lengths in ([1, 2], [-1, 7], [3, 3, 1]):
        with pytest.raises(ChunkError):
            join_simple(b"abcdef", packed(lengths), python=python)
    with pytest.raises(ChunkError, match="whole number"):
        join_simple(b"abcdef", b"\x06\x00\x00", python=python)


@pytest.mark.parametrize("first,n", [(0, 0), (1, 3), (123_456_789, 100), ((1 << 63) - 1, 2)])
def test_consecutive_ids_in_c_and_python(first: int, n: int) -> None:
    want = b"".join(struct.pack(">Q", first + i) for i in range(n))
    assert entries.consecutive_ids(first, n, python=True) == want
    assert entries.consecutive_ids(first, n) == want
    with pytest.raises(ValueError):
        entries.consecutive_ids(first, -1)


@pytest.mark.parametrize("python", [False, True])
def test_simple_only(python: bool) -> None:
    data = join_simple(b"abcdef", [1, 2, 3])
    batch = bytes([0x80]) + struct.pack(">HII", 1, 5, 9) + simple_entry(b"hello")
    for buf, want in [(data, True), (b"", True), (data[:-1], False), (data + batch, False),
                      (data + b"\x00\x00", False)]:
        assert entries.simple_only(buf, python) is want


def test_simple_prefix_in_c_and_python_is_the_cut_of_a_batch() -> None:
    """What a simple batch's cut takes, walked in C, is what PublishBatch's walk of its entries
    one by one takes (the batch not said simple); both refuse a sub-entry batch or an entry cut
    short alike."""
    from streamlet.core.batch import PublishBatch

    rng = random.Random(3)
    for _ in range(500):
        sizes = [rng.choice((0, 1, 10, 100, 1000)) for _ in range(rng.randrange(1, 30))]
        data = join_simple(b"".join(b"x" * n for n in sizes), sizes)
        most, room = rng.randrange(0, 35), rng.choice((0, 4, 14, 100, 5000, 1 << 20))
        got = entries.simple_prefix(data, most, room)
        assert got == entries.simple_prefix(data, most, room, python=True)
        n = len(sizes)
        ids = entries.consecutive_ids(1, n)
        fast = PublishBatch(1, n, ids, data, n, 1, n, True, simple=True)
        slow = PublishBatch(1, n, ids, data, n, 1, n, True, simple=None)
        if most == 0:
            continue  # the stream never cuts to nothing
        assert [_fields(b) for b in fast.cut(most, room)] == \
            [_fields(b) for b in slow.cut(most, room)]
        head, _ = fast.cut(most, room)
        assert (head.count, len(head.data)) == got
    for bad in (data[:-1], bytes([0x80]) + struct.pack(">HII", 1, 5, 9) + simple_entry(b"hello")):
        with pytest.raises(ChunkError):
            entries.simple_prefix(bad, 100, 1 << 20)
        with pytest.raises(ChunkError):
            entries.simple_prefix(bad, 100, 1 << 20, python=True)


def _fields(b: object) -> tuple[object, ...] | None:
    """A batch's messages and what it says of them (``simple`` aside: that is the point)."""
    from streamlet.core.batch import PublishBatch

    if b is None:
        return None
    assert isinstance(b, PublishBatch)
    return (b.count, b.ids, bytes(b.data), b.num_records, b.first_id, b.last_id, b.increasing)
