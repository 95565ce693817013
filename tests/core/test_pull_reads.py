"""Pull reads beside push subscriptions: fetch what is stored, and be woken when more is (what
a request/response protocol's long poll and a replica's fetch need). Manual clock, in memory."""

from __future__ import annotations

from pathlib import Path

from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Publisher, Stream
from streamlet.storage.chunk import HEADER_SIZE, iter_records
from tests.support.fakes import FakeSession, ManualClock, batch


def _records(chunks: list) -> list[bytes]:  # type: ignore[type-arg]
    return [bytes(r) for _ref, view in chunks for r in iter_records(view[HEADER_SIZE:])]


def test_a_pull_reader_is_woken_when_its_offset_is_stored_and_fetches_it(tmp_path: Path) -> None:
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    publisher = Publisher(1, None, stream, FakeSession())
    stream.publishers.add(publisher)
    assert stream.fetch(0, 1 << 20) == []
    woken: list[str] = []
    stream.when_stored(0, lambda: woken.append("first"))
    stream.when_stored(2, lambda: woken.append("third"))
    stream.publish(publisher, batch(1, [b"a", b"b"]))
    assert woken == [], "not before it is stored"
    clock.advance(0)
    assert woken == ["first"], "offset 2 is not stored yet"
    assert _records(stream.fetch(0, 1 << 20)) == [b"a", b"b"]
    stream.when_stored(1, lambda: woken.append("at once"))  # already stored
    assert woken == ["first", "at once"]
    clock.advance(1)
    stream.publish(publisher, batch(3, [b"c"]))
    clock.advance(0)
    assert woken[-1] == "third"
    assert _records(stream.fetch(2, 1 << 20)) == [b"c"]
    stream.close()


def test_a_deleted_stream_wakes_its_pull_readers(tmp_path: Path) -> None:
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", ManualClock())
    woken: list[bool] = []
    stream.when_stored(0, lambda: woken.append(stream.deleted))
    stream.mark_deleted()
    assert woken == [True]
    stream.close()
