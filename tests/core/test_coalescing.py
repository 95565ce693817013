"""Chunk coalescing and growth in a stream (core/pending.py applying core/packing.py), with a
manual clock: no waiting, no event loop."""

from __future__ import annotations

from pathlib import Path

from streamlet.core.packing import (
    CHUNK_MIN_ENTRIES,
    DENSE_S,
    LIMIT_S,
    LOADED_ENTRIES,
    PAUSE_S,
)
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
    clock.advance(DENSE_S / 2)
    n = LOADED_ENTRIES
    stream.publish(publisher, batch(2, [b"b"] * n))  # right after a: the stream is loaded
    clock.advance(0)
    assert session.confirms == [1], "a loaded stream holds its chunk to gather more"
    clock.advance(PAUSE_S / 2)
    stream.publish(publisher, batch(2 + n, [b"c"] * n))
    clock.advance(PAUSE_S * 0.9)
    assert session.confirms == [1], "publishes keep coming: the pause starts from the last"
    clock.advance(PAUSE_S)  # (a timer looking again waits a millisecond, the loop's tick)
    assert session.confirms == list(range(1, 2 + 2 * n)), "its publishers paused: written"
    assert _chunk_starts(stream, [0, 1, 1 + 2 * n - 1]) == [0, 1, 1], "b and c: one chunk"
    stream.close()


def test_a_chunk_that_never_pauses_is_written_when_limit_old(tmp_path: Path) -> None:
    clock = ManualClock()
    stream, publisher, session = _stream(tmp_path, clock)
    stream.publish(publisher, batch(1, [b"a"]))
    clock.advance(0)
    clock.advance(DENSE_S / 2)
    n = LOADED_ENTRIES
    stream.publish(publisher, batch(2, [b"m"] * n))  # the chunk opens; the stream is loaded
    opened, n = clock.now, 2 + n
    while not session.confirms[1:]:  # publishes close together, never a pause
        assert clock.now < opened + LIMIT_S + 0.001, "held past LIMIT_S (and a timer's tick)"
        clock.advance(DENSE_S / 2)
        stream.publish(publisher, batch(n, [b"m"]))
        n += 1
    assert clock.now >= opened + LIMIT_S, "written before LIMIT_S"
    clock.advance(PAUSE_S * 2)
    assert session.confirms == list(range(1, n))
    stream.close()


def test_a_burst_is_written_as_chunks_that_double(tmp_path: Path) -> None:
    clock = ManualClock()
    stream, publisher, session = _stream(tmp_path, clock)
    n = CHUNK_MIN_ENTRIES * 4
    stream.publish(publisher, batch(1, [b"m%d" % i for i in range(n)]))
    assert len(session.confirms) == 3 * CHUNK_MIN_ENTRIES, "the full chunks go at once"
    clock.advance(PAUSE_S)  # the rest, once no publish follows
    assert len(session.confirms) == n
    first, second = CHUNK_MIN_ENTRIES, 3 * CHUNK_MIN_ENTRIES
    assert _chunk_starts(stream, [0, first - 1, first, second - 1, second, n - 1]) == [
        0, 0, first, first, second, second]
    stream.close()


def test_a_window_smaller_than_the_target_is_not_held(tmp_path: Path) -> None:
    """A publisher with 1,000 unconfirmed at most, frames of 100, against a target that grew
    past its window: each chunk is written PAUSE_S after the window's last frame, and the
    target comes down to what the window fills."""
    clock = ManualClock()
    stream, publisher, session = _stream(tmp_path, clock)
    window, sent = 1_000, 0
    for _ in range(8):
        while sent - len(session.confirms) < window:  # the window's frames, 10 us apart
            stream.publish(publisher, batch(sent + 1, [b"x"] * 100))
            sent += 100
            clock.advance(0.00001)
        clock.advance(PAUSE_S)
        assert len(session.confirms) == sent, "nothing held once the publisher waits"
    assert stream.pending._packing.target <= 2 * window
    stream.close()


def test_a_timer_armed_for_a_taken_chunk_does_not_write_the_next(tmp_path: Path) -> None:
    clock = ManualClock()
    stream, publisher, session = _stream(tmp_path, clock)
    stream.publish(publisher, batch(1, [b"a"] * 100))
    stream.publish(publisher, batch(101, [b"b"] * 100))  # loaded; held, a timer armed
    clock.advance(PAUSE_S / 2)
    stream.flush()  # the stream writes it by itself (as on close or seal)
    assert len(session.confirms) == 200
    stream.publish(publisher, batch(201, [b"c"] * 100))
    clock.advance(PAUSE_S / 2)  # the first timer's time: not the new chunk's
    assert len(session.confirms) == 200
    clock.advance(PAUSE_S / 2)
    assert len(session.confirms) == 300
    stream.close()
