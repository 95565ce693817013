"""Chunk coalescing and growth, with a manual clock: no waiting, no event loop."""

from __future__ import annotations

from pathlib import Path

from streamlet.core.pending import CHUNK_MIN_ENTRIES, COALESCE_S
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Publisher, Stream
from tests.support.fakes import FakeSession, ManualClock, batch


def _stream(tmp_path: Path, clock: ManualClock) -> tuple[Stream, Publisher, FakeSession]:
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    session = FakeSession()
    publisher = Publisher(1, None, stream, session)
    stream.publishers.add(publisher)
    return stream, publisher, session


def _chunk_starts(stream: Stream, offsets: list[int]) -> list[int]:
    starts = []
    for offset in offsets:
        ref = stream.log.find_chunk(offset)
        assert ref is not None
        starts.append(ref.chunk_id)
    return starts


def test_a_publish_after_a_quiet_spell_is_written_at_once(tmp_path: Path) -> None:
    clock = ManualClock()
    stream, publisher, session = _stream(tmp_path, clock)
    stream.publish(publisher, batch(1, [b"a"]))
    assert session.confirms == [] and clock.pending == 1, "written on the next loop turn"
    clock.advance(0)
    assert session.confirms == [1]
    stream.close()


def test_publishes_under_load_gather_into_one_chunk(tmp_path: Path) -> None:
    clock = ManualClock()
    stream, publisher, session = _stream(tmp_path, clock)
    stream.publish(publisher, batch(1, [b"a"]))
    clock.advance(0)  # chunk 0: [a]
    clock.advance(COALESCE_S / 5)
    stream.publish(publisher, batch(2, [b"b"]))
    stream.publish(publisher, batch(3, [b"c"]))
    clock.advance(0)
    assert session.confirms == [1], "within COALESCE_S of the last write: held to gather more"
    clock.advance(COALESCE_S)
    assert session.confirms == [1, 2, 3]
    assert _chunk_starts(stream, [0, 1, 2]) == [0, 1, 1], "b and c share one chunk"
    stream.close()


def test_a_burst_is_written_as_chunks_that_double(tmp_path: Path) -> None:
    clock = ManualClock()
    stream, publisher, session = _stream(tmp_path, clock)
    n = CHUNK_MIN_ENTRIES * 4
    stream.publish(publisher, batch(1, [b"m%d" % i for i in range(n)]))
    assert len(session.confirms) == 3 * CHUNK_MIN_ENTRIES, "the full chunks go at once"
    clock.advance(COALESCE_S)  # the rest, after the coalescing pause
    assert len(session.confirms) == n
    first, second = CHUNK_MIN_ENTRIES, 3 * CHUNK_MIN_ENTRIES
    assert _chunk_starts(stream, [0, first - 1, first, second - 1, second, n - 1]) == [
        0, 0, first, first, second, second]
    stream.close()
