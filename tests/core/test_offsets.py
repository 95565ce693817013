"""The neutral offset spec resolved against a stream (what every protocol's reader starts from).
In memory, manual clock."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamlet.core.offsets import OffsetSpec, Start, resolve
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Publisher, Stream
from tests.support.fakes import FakeSession, ManualClock, batch


@pytest.fixture
def stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stream]:
    """Chunks of offsets 0-2 (stored at t=1000 ms), 3-4 (t=2000) and 5 (t=3000)."""
    stamps = itertools.count(1000, 1000)
    monkeypatch.setattr("streamlet.storage.log._now_ms", lambda: next(stamps))
    clock = ManualClock()
    s = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    publisher = Publisher(1, None, s, FakeSession())
    s.publishers.add(publisher)
    for first, bodies in ((1, [b"a", b"b", b"c"]), (4, [b"d", b"e"]), (6, [b"f"])):
        s.publish(publisher, batch(first, bodies))
        clock.advance(1)  # a quiet spell: each publish is its own chunk
    yield s
    s.close()


@pytest.mark.parametrize("spec, offset", [
    (OffsetSpec(Start.FIRST), 0),
    (OffsetSpec(Start.LAST), 5),
    (OffsetSpec(Start.NEXT), 6),
    (OffsetSpec(Start.OFFSET, 4), 4),
    (OffsetSpec(Start.OFFSET, 99), 99),  # past the end: waits for it
    (OffsetSpec(Start.TIMESTAMP, 0), 0),
    (OffsetSpec(Start.TIMESTAMP, 1500), 3),  # the first chunk stored at or after
    (OffsetSpec(Start.TIMESTAMP, 2000), 3),
    (OffsetSpec(Start.TIMESTAMP, 9999), 6),  # none yet: what comes next
])
def test_resolve(stream: Stream, spec: OffsetSpec, offset: int) -> None:
    assert resolve(stream, spec) == offset


def test_an_empty_stream_starts_every_spec_at_zero(tmp_path: Path) -> None:
    s = Stream("s", tmp_path / "s", StreamSettings(), "never", ManualClock())
    assert {resolve(s, OffsetSpec(start, 5)) for start in Start} == {0, 5}  # OFFSET keeps its value
    assert resolve(s, OffsetSpec(Start.LAST)) == 0
    s.close()


def test_last_and_next_see_what_is_confirmed_but_not_yet_flushed(stream: Stream) -> None:
    publisher = next(iter(stream.publishers))
    stream.publish(publisher, batch(7, [b"g", b"h"]))  # queued: the clock has not run the flush
    assert resolve(stream, OffsetSpec(Start.NEXT)) == 8
    assert resolve(stream, OffsetSpec(Start.LAST)) == 6
