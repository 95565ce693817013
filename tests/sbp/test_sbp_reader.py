"""FETCH's reader (streamlet.broker.sbp.fetching): a stream read a piece at a time gives the same
records, in order, once each, whatever the piece size and wherever a piece stops inside a
chunk; a piece after the first keeps to its limit; a connection keeps the readers of its last
fetch within a byte limit and gives one back only to a fetch of its stream from where it
stopped. In memory, on a real stream core and its log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streamlet.broker.sbp.fetching import Reader, Readers, Records, take
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Publisher, Stream
from tests.support.fakes import FakeSession, ManualClock, batch


def pairs(r: Records) -> list[tuple[int, bytes]]:
    """The records read, from their lengths or (length-prefixed) from the payload."""
    payload, at, out = b"".join(r.bodies), 0, []
    prefixed = bool(r.count) and not r.lengths
    sizes = iter(r.lengths)
    for first, count in r.runs:
        for offset in range(first, first + count):
            n = int.from_bytes(payload[at : at + 4]) if prefixed else next(sizes)
            at += 4 if prefixed else 0
            out.append((offset, payload[at : at + n]))
            at += n
    assert at == len(payload) == sum(r.run_bytes) == r.size + (4 * r.count if prefixed else 0)
    return out


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[Stream]:
    """Five chunks of 40 records each, of 1 to 40 bytes (offsets 0..199)."""
    clock = ManualClock()
    s = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    publisher = Publisher(1, None, s, FakeSession())
    s.publishers.add(publisher)
    for k in range(5):
        s.publish(publisher, batch(1 + 40 * k, [body(40 * k + i) for i in range(40)]))
        clock.advance(1)  # one chunk per batch
    assert s.commit_end == 200
    yield s
    s.close()


def body(offset: int) -> bytes:
    return bytes([offset % 251]) * (1 + offset % 40)


@pytest.mark.parametrize("prefixed", [False, True])
@pytest.mark.parametrize("start", [0, 17, 40, 199])
@pytest.mark.parametrize("piece", [40, 41, 77, 333, 1 << 20])  # >= the largest record
def test_pieces_give_every_record_once_in_order(stream: Stream, start: int, piece: int,
                                                prefixed: bool) -> None:
    reader, got, first = Reader(stream, start), [], True
    while True:
        r = reader.read(piece, not first, prefixed)
        if not r:
            break
        # a piece keeps to its limit, but for the first record of the answer
        assert r.size <= piece or (first and len(r) == 1)
        got += pairs(r)
        first = False
    assert got == [(o, body(o)) for o in range(start, 200)]
    assert reader.start == 200 and reader.held == 0


@pytest.mark.parametrize("prefixed", [False, True])
@pytest.mark.parametrize("start", [0, 1, 39, 40, 123, 199])
@pytest.mark.parametrize("max_bytes", [0, 1, 40, 41, 500, 4000, 1 << 20])
def test_a_first_piece_is_what_the_rule_takes(stream: Stream, start: int,
                                              max_bytes: int, prefixed: bool) -> None:
    """fetching.take says the rule (the first record always, then within max_bytes: the
    batches' bytes, length prefixes not counted); the reader applies it chunk by chunk in C."""
    stored = [(o, body(o)) for o in range(200)]
    got = Reader(stream, start).read(max_bytes, False, prefixed)
    assert pairs(got) == take(stored, start, max_bytes)


def test_a_piece_after_the_first_may_be_empty_when_its_next_record_is_too_big(
        stream: Stream) -> None:
    reader = Reader(stream, 39)  # offset 39: 40 bytes, then offset 40: 1 byte
    assert pairs(reader.read(1)) == [(39, body(39))]  # the first always comes
    assert not reader.read(0, taken=True)
    assert pairs(reader.read(1, taken=True)) == [(40, body(40))]


@pytest.mark.parametrize("prefixed", [False, True])
def test_records_from_pieces_extend_as_one(stream: Stream, prefixed: bool) -> None:
    reader = Reader(stream, 5)
    whole = Records()
    for _ in range(6):
        whole.extend(reader.read(100, bool(whole), prefixed))
    assert pairs(whole) == [(o, body(o)) for o in range(5, 5 + len(whole))]
    assert whole.runs == [(5, len(whole))]  # consecutive runs merged


def test_a_reader_holds_the_rest_of_the_chunk_it_stopped_in(stream: Stream) -> None:
    reader = Reader(stream, 0)
    reader.read(30)  # stops inside the first chunk
    assert 0 < reader.held < sum(len(body(o)) + 4 for o in range(40))
    assert reader.start == pairs(reader.read(10 ** 6, taken=True))[0][0]


def test_readers_are_kept_within_a_limit_and_given_back_only_where_they_stopped(
        stream: Stream, tmp_path: Path) -> None:
    a = Reader(stream, 0)
    a.read(30)
    kept = Readers(limit=a.held)
    kept.keep([a])
    assert kept.take(stream, a.start + 1) is None  # another offset: a new reader
    kept.keep([a])
    assert kept.take(stream, a.start) is a
    assert kept.take(stream, a.start) is None  # taken once

    other = Stream("t", tmp_path / "t", StreamSettings(), "never", ManualClock())
    b = Reader(other, 0)
    kept.keep([a, b])  # b holds nothing: not kept
    assert kept.take(other, 0) is None
    small = Readers(limit=a.held - 1)
    small.keep([a])  # past the limit: not kept
    assert small.take(stream, a.start) is None
    stream.mark_deleted()
    kept.keep([a])  # a deleted stream's reader is not kept
    assert kept.take(stream, a.start) is None
    other.close()
