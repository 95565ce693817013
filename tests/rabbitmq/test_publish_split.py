"""The Publish split: the C accelerator and the Python path agree, on good and bad frames."""

from __future__ import annotations

import dataclasses
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest

import streamlet.rabbitmq.publish as publish
from streamlet.core.batch import PublishBatch
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.fields import Malformed


def body(cmd: f.Publish) -> bytes:
    return f.encode(cmd)[8:]  # size, key, version cut off


def parse(frame: bytes, version: int) -> PublishBatch:
    """The batch the adapter makes of a split."""
    return PublishBatch(*publish.parse_publish(frame, version))


def python_split(frame: bytes, version: int) -> PublishBatch:
    return PublishBatch(*publish._split_python(frame, version))


def test_a_split_is_publish_batchs_fields_in_order() -> None:
    """The codec names no core type: its tuple is PublishBatch's fields, in order."""
    msgs = [f.PublishedMessage.simple(7, b"x", "red")]
    for version in (1, 2):
        split = publish.parse_publish(body(f.Publish(4, msgs, version=version)), version)
        assert len(split) == len(dataclasses.fields(PublishBatch))
        assert dataclasses.astuple(PublishBatch(*split)) == split
    assert publish.parse_publish(body(f.Publish(4, msgs)), 1)[:3] == (4, 1, struct.pack(">Q", 7))


def sub_batch(records: list[bytes]) -> bytes:
    inner = b"".join(struct.pack(">I", len(r)) + r for r in records)
    return struct.pack(">BHII", 0x80, len(records), len(inner), len(inner)) + inner


def test_split_gives_confirm_ids_and_chunk_data() -> None:
    msgs = [f.PublishedMessage.simple(i, b"m%d" % i) for i in range(1, 6)]
    msgs.append(f.PublishedMessage(6, sub_batch([b"a", b"bc", b"def"])))
    b = parse(body(f.Publish(4, msgs)), 1)
    assert (b.publisher_id, b.count, b.num_records) == (4, 6, 8)
    assert b.ids == struct.pack(">6Q", *range(1, 7))
    assert b.data == b"".join(m.entry for m in msgs)
    assert (b.first_id, b.last_id, b.increasing) == (1, 6, True)
    assert [(i, e, r) for i, e, r in b.messages()] == [
        (m.publishing_id, m.entry, 3 if m.publishing_id == 6 else 1) for m in msgs]


def test_non_increasing_ids_are_flagged() -> None:
    msgs = [f.PublishedMessage.simple(i, b"x") for i in (5, 3, 9)]
    b = parse(body(f.Publish(0, msgs)), 1)
    assert (b.first_id, b.last_id, b.increasing) == (5, 9, False)


def test_v2_carries_filter_values() -> None:
    msgs = [f.PublishedMessage.simple(1, b"x", "red"), f.PublishedMessage.simple(2, b"y", None)]
    b = parse(body(f.Publish(0, msgs, version=2)), 2)
    assert b.filter_values == ["red", None]
    assert b.data == msgs[0].entry + msgs[1].entry


@pytest.mark.skipif(publish._split_c is None, reason="the C accelerator was not built here")
def test_c_and_python_agree_on_random_frames_and_their_truncations() -> None:
    rng = random.Random(7)
    for _ in range(500):
        msgs = []
        for i in range(rng.randrange(0, 20)):
            if rng.random() < 0.2:
                msgs.append(f.PublishedMessage(i, sub_batch([rng.randbytes(rng.randrange(5))
                                                             for _ in range(rng.randrange(1, 4))])))
            else:
                msgs.append(f.PublishedMessage.simple(rng.randrange(1 << 63), rng.randbytes(rng.randrange(40))))
        raw = body(f.Publish(rng.randrange(256), msgs))
        n = len(msgs)
        cuts = [raw, raw[: rng.randrange(len(raw) + 1)], raw + b"\0", raw[:5] + b"\xff" + raw[6:],
                # a Count that lies, either way: entries must never be copied past their room
                raw[:1] + struct.pack(">i", n + 1) + raw[5:], raw[:1] + struct.pack(">i", max(n - 1, 0)) + raw[5:],
                raw[:1] + struct.pack(">i", -1) + raw[5:]]
        for frame in cuts:
            assert _outcome(parse, frame) == _outcome(python_split, frame)


def _outcome(split: Callable[[bytes, int], PublishBatch], frame: bytes) -> object:
    """The batch, or "malformed": both paths must agree on which frames are bad, too."""
    try:
        return split(frame, 1)
    except Malformed:
        return "malformed"


def _entries(sizes: list[int | list[int]]) -> list[f.PublishedMessage]:
    """A message per size: an int is a simple entry of that many bytes, a list a sub-batch."""
    return [f.PublishedMessage(i + 1, sub_batch([b"r" * n for n in s])) if isinstance(s, list)
            else f.PublishedMessage.simple(i + 1, b"e" * s) for i, s in enumerate(sizes)]


# (message sizes, max entries, max bytes of entries, messages in the head, or None: all fit)
CUTS = [
    ([10] * 5, 5, 1000, None),                # fits: the batch itself, nothing left
    ([10] * 5, 2, 1000, 2),                   # by entries
    ([10] * 5, 100, 28, 2),                   # by bytes: 14 B an entry, two fit in 28
    ([10] * 5, 100, 27, 1),
    ([100, 10], 100, 30, 1),                  # an entry over the limit still makes a head
    ([[1, 2, 3], 10, [4]], 2, 1000, 2),       # a sub-batch is one entry
]


@pytest.mark.parametrize(("sizes", "max_entries", "max_bytes", "head_count"), CUTS)
def test_cut_a_batch_into_head_and_rest(sizes: list[int | list[int]], max_entries: int,
                                        max_bytes: int, head_count: int | None) -> None:
    whole = parse(body(f.Publish(3, _entries(sizes))), 1)
    head, rest = whole.cut(max_entries, max_bytes)
    if head_count is None:
        assert head is whole and rest is None
        return
    assert rest is not None and head.count == head_count
    assert head.ids + rest.ids == whole.ids and bytes(head.data) + rest.data == whole.data
    assert head.num_records + rest.num_records == whole.num_records
    assert head.count == 1 or len(head.data) <= max_bytes
    for part in (head, rest):
        assert part.publisher_id == 3 and part.increasing
        assert part.messages() == [m for m in whole.messages()
                                   if part.first_id <= m[0] <= part.last_id]


def test_cut_keeps_filter_values_and_order_flags() -> None:
    msgs = [f.PublishedMessage.simple(i, b"x", c) for i, c in ((5, "a"), (6, None), (2, "b"), (9, "c"))]
    whole = parse(body(f.Publish(0, msgs, version=2)), 2)
    head, rest = whole.cut(2, 1 << 20)
    assert rest is not None
    assert [head.filter_values, rest.filter_values] == [["a", None], ["b", "c"]]
    assert [(p.first_id, p.last_id, p.increasing) for p in (head, rest)] == [
        (5, 6, True), (2, 9, True)]


@pytest.mark.parametrize("split", [parse, python_split])
def test_a_split_says_whether_every_entry_is_simple(split: Any) -> None:
    """PublishBatch.simple: the chunk it goes into may be sent from the file by SBP's FETCH
    only if no entry is a sub-entry batch, even one of a single record."""
    plain = [f.PublishedMessage.simple(1, b"x"), f.PublishedMessage.simple(2, b"yz")]
    one = f.PublishedMessage(3, sub_batch([b"only"]))
    assert split(body(f.Publish(0, plain)), 1).simple is True
    mixed = split(body(f.Publish(0, [*plain, one])), 1)
    assert mixed.simple is False and mixed.count == mixed.num_records == 3
