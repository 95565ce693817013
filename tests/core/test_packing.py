"""The packing rules (core/packing.py) as tables: publish times and writes in, the entry target
and the pending chunk's due time out."""

from __future__ import annotations

import pytest

from streamlet.core.packing import (
    CHUNK_MAX_ENTRIES,
    CHUNK_MIN_ENTRIES,
    ENTRY_BYTES,
    LIMIT_S,
    LOADED_ENTRIES,
    PAUSE_S,
    QUIET_S,
    Packing,
)

MIN, MAX = CHUNK_MIN_ENTRIES, CHUNK_MAX_ENTRIES


def _packing(target: int, loaded: bool, last_publish: float) -> Packing:
    p = Packing()
    p.target, p.loaded, p.last_publish = target, loaded, last_publish
    p.waits = loaded  # as if its pending chunk opened now
    return p


def test_a_new_stream_starts_small_and_unloaded() -> None:
    p = Packing()
    p.published(5.0)
    assert (p.target, p.loaded, p.target_bytes) == (MIN, False, MIN * ENTRY_BYTES)


@pytest.mark.parametrize(("fills", "target"), [
    (0, MIN), (1, 2 * MIN), (2, 4 * MIN), (3, 8 * MIN), (4, MAX), (10, MAX),
])
def test_each_chunk_that_fills_doubles_the_target_up_to_the_max(fills: int, target: int) -> None:
    p = Packing()
    for _ in range(fills):
        p.filled()
    assert p.target == target
    assert p.loaded == (fills > 0)


@pytest.mark.parametrize(("gap", "target", "loaded"), [
    (0.0, MAX, True),  # publishes keep coming
    (PAUSE_S, MAX, True),
    (QUIET_S * 0.99, MAX, True),  # a descheduled publisher: nothing changes
    (QUIET_S * 1.01, MAX // 2, False),  # a quiet spell halves the target per QUIET_S
    (QUIET_S * 2.5, MAX // 4, False),
    (QUIET_S * 3.01, MAX // 8, False),
    (QUIET_S * 5.01, MIN, False),  # never below the minimum
    (3600.0, MIN, False),
])
def test_a_quiet_spell_shrinks_the_target(gap: float, target: int, loaded: bool) -> None:
    p = _packing(MAX, True, 10.0)
    p.published(10.0 + gap)
    assert (p.target, p.loaded, p.last_publish) == (target, loaded, 10.0 + gap)


@pytest.mark.parametrize(("loaded", "entries", "last_publish", "due"), [
    (False, 1_000, 10.0, 10.0),  # opened without load: the next loop turn
    (False, 1_000, 10.004, 10.0),
    (True, LOADED_ENTRIES - 1, 10.0, 10.0),  # opened loaded, but small: the same
    (True, LOADED_ENTRIES, 10.0, 10.0 + PAUSE_S),  # loaded: once its publishers pause ...
    (True, 1_000, 10.002, 10.002 + PAUSE_S),  # ... counted from the last publish ...
    (True, 1_000, 10.0 + LIMIT_S, 10.0 + LIMIT_S),  # ... or when it is LIMIT_S old
])
def test_when_a_chunk_that_is_not_full_is_written(loaded: bool, entries: int,
                                                   last_publish: float, due: float) -> None:
    p = _packing(MAX, loaded, 10.0)
    p.open(10.0)
    p.last_publish = last_publish
    assert p.due(entries) == pytest.approx(due)


def test_a_chunk_opened_without_load_goes_on_the_next_turn_whatever_follows() -> None:
    """A slow publisher's catch-up (a frame after a pause, then more right behind it, all in
    one read): the stream becomes loaded, but the chunk opened before that does not wait."""
    p = _packing(MAX, False, 10.0)
    p.published(10.001)
    p.open(10.001)
    for i in range(1, 10):
        p.published(10.001 + i * 0.00001)
    assert p.loaded and p.due(100) == 10.001


@pytest.mark.parametrize(("target", "loaded", "entries", "after"), [
    (MAX, True, 3_000, (MAX // 2, True)),  # waited and did not fill: the target halves
    (MIN, True, 100, (MIN, True)),  # never below the minimum
    (MAX, True, LOADED_ENTRIES - 1, (MAX, False)),  # small: written on the next loop turn
    (MAX, False, 10, (MAX, False)),
    (MIN, False, LOADED_ENTRIES, (MIN, True)),  # a loop turn's worth this big: load
    (MIN, False, LOADED_ENTRIES - 1, (MIN, False)),
])
def test_what_a_chunk_written_before_it_filled_teaches(target: int, loaded: bool, entries: int,
                                                       after: tuple[int, bool]) -> None:
    p = _packing(target, loaded, 10.0)
    p.written(entries)
    assert (p.target, p.loaded) == after


def _steady(frame_gap: float, frames: int, frame_entries: int = 100) -> list[int]:
    """Chunk sizes for a publisher sending ``frames`` frames ``frame_gap`` apart, as the
    pending chunk applies the rules (full when another frame would not fit; each frame in a
    loop turn of its own, which writes what is due)."""
    p, now, pending, sizes = Packing(), 100.0, 0, []
    for _ in range(frames):
        if pending and now >= p.due(pending):
            sizes.append(pending)
            p.written(pending)
            pending = 0
        p.published(now)
        if pending + frame_entries > p.target:  # the target shrank: written first
            sizes.append(pending)
            p.filled()
            pending = 0
        if not pending:
            p.open(now)
        pending += frame_entries
        if pending + frame_entries > p.target:
            sizes.append(pending)
            p.filled()
            pending = 0
        now += frame_gap
    return sizes


def test_a_steady_publisher_gets_the_same_chunks_at_any_speed() -> None:
    """A frame of 100 every 10 us (10 M msg/s) or every 0.1 ms (1 M msg/s, each frame alone
    in a loop turn): the same boundaries, as long as a chunk fills within LIMIT_S."""
    fast = _steady(0.00001, 1_000)
    assert fast == _steady(0.0001, 1_000)
    # the first frame alone (no load yet), then whole frames up to the doubling target
    assert fast[:7] == [100, 200, 500, 1_000, 2_000, 4_000, 4_000]
    assert set(fast[5:]) == {4_000}


def test_a_slow_publisher_is_written_frame_by_frame() -> None:
    """A frame every millisecond (10 messages: the latency workload) is never held."""
    assert _steady(0.001, 100, frame_entries=10) == [10] * 99


def test_small_frames_close_together_are_not_held() -> None:
    """A latency publisher catching up (frames of 10, 0.1 ms apart): loaded, but each frame
    is under LOADED_ENTRIES, so none waits for a pause."""
    assert _steady(0.0001, 100, frame_entries=10) == [10] * 99
