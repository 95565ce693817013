"""The commit point: a replicated stream's leader confirms and lets readers see a chunk only
once ``commit`` says a majority holds it; a stream with one copy commits on the write. In memory,
manual clock, a fake session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streamlet.core.offsets import OffsetSpec, Start, resolve
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Publisher, Stream
from streamlet.core.subscription import Subscription
from tests.support.fakes import FakeSession, ManualClock, batch


class Leader:
    """A replicated stream's leader with one named publisher and one subscription."""

    def __init__(self, root: Path) -> None:
        self.clock = ManualClock()
        self.stream = Stream("s", root / "s", StreamSettings(), "never", self.clock)
        self.stream.awaits_commit = True
        self.session = FakeSession()
        self.publisher = Publisher(1, "ref", self.stream, self.session)
        self.stream.attach_publisher(self.publisher)
        self.reader = FakeSession()
        self.sub = Subscription(self.reader, 3, self.stream, 0, 100, {})
        self.stream.attach_reader(self.sub)

    def publish(self, first_id: int, bodies: list[bytes]) -> None:
        self.stream.publish(self.publisher, batch(first_id, bodies))
        self.clock.advance(1)  # flushed: written, a chunk of its own


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Leader]:
    lead = Leader(tmp_path)
    yield lead
    lead.stream.close()


def test_a_written_chunk_waits_for_the_commit_to_be_confirmed_and_read(leader: Leader) -> None:
    stream, written, committed = leader.stream, [], []
    stream.when_written(0, lambda: written.append(True))
    stream.when_stored(0, lambda: committed.append(True))
    leader.publish(1, [b"a", b"b"])
    leader.publish(3, [b"c"])
    assert stream.log.next_offset == 3, "both chunks are written"
    assert written == [True], "replication is woken by the write"
    assert leader.session.confirms == [] and leader.reader.delivered == [] and committed == []
    assert stream.fetch(0, 1 << 20) == [] and stream.committed_chunk_id == -1
    assert resolve(stream, OffsetSpec(Start.NEXT)) == 0, "next is taken at the commit"
    stream.commit(2)  # a majority holds the first chunk
    assert leader.session.confirms == [1, 2] and committed == [True]
    assert leader.reader.delivered == [(3, 1)], "the committed chunk only"
    assert [c.chunk_id for c, _ in stream.fetch(0, 1 << 20)] == [0]
    assert stream.committed_chunk_id == 0 and stream.stats()["committed_chunk_id"] == 0
    stream.commit(1)  # an older answer: the commit never moves back
    assert stream.commit_end == 2
    stream.commit(3)
    assert leader.session.confirms == [1, 2, 3] and leader.reader.delivered == [(3, 1), (3, 1)]
    assert resolve(stream, OffsetSpec(Start.LAST)) == 2


def test_a_duplicate_is_confirmed_only_once_what_holds_its_original_is_committed(
        leader: Leader) -> None:
    leader.publish(1, [b"a"])
    leader.publish(1, [b"a"])  # resent before the confirm (a client recovering)
    assert leader.stream.log.next_offset == 1, "not stored twice"
    assert leader.session.confirms == [], "its original is not committed yet"
    leader.stream.commit(1)
    assert sorted(leader.session.confirms) == [1, 1]


def test_a_duplicate_of_a_pending_message_is_confirmed_with_its_chunk(tmp_path: Path) -> None:
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    session = FakeSession()
    publisher = Publisher(1, "ref", stream, session)
    stream.attach_publisher(publisher)
    stream.publish(publisher, batch(1, [b"a"]))
    clock.advance(1)
    stream.publish(publisher, batch(2, [b"b"]))  # pending: not written yet
    stream.publish(publisher, batch(2, [b"b"]))  # its duplicate
    assert session.confirms == [1], "the duplicate waits for the write of its original"
    clock.advance(1)
    assert session.confirms == [1, 2, 2] and stream.log.next_offset == 2
    stream.close()


def test_one_copy_commits_on_the_write(tmp_path: Path) -> None:
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    publisher = Publisher(1, None, stream, FakeSession())
    stream.attach_publisher(publisher)
    stream.publish(publisher, batch(1, [b"a", b"b"]))
    clock.advance(1)
    assert stream.commit_end == stream.log.next_offset == 2
    assert stream.committed_chunk_id == 0 and len(stream.fetch(0, 1 << 20)) == 1
    stream.close()
    again = Stream("s", tmp_path / "s", StreamSettings(), "never", ManualClock())
    assert again.commit_end == 2, "what a single copy wrote is committed at start"
    again.close()


def test_a_followers_readers_wait_for_the_leaders_commit(tmp_path: Path) -> None:
    """A follower's log grows by what its leader sent (here: written directly); its readers
    see it once the leader's commit reaches them."""
    follower = Stream("s", tmp_path / "s", StreamSettings(), "never", ManualClock())
    follower.awaits_commit = True
    follower.commit_end = 0
    reader = FakeSession()
    sub = Subscription(reader, 1, follower, 0, 10, {})
    follower.attach_reader(sub)
    woken: list[int] = []
    follower.when_written(0, lambda: woken.append(0))
    follower.log.append(b"\x00\x00\x00\x01x", 1, 1)  # stands for a chunk the leader sent
    follower.appended()
    assert woken == [0] and reader.delivered == []
    follower.commit(1)
    assert reader.delivered == [(1, 1)]
    follower.close()


def test_deleting_wakes_the_replication_readers(leader: Leader) -> None:
    woken: list[str] = []
    leader.stream.when_written(5, lambda: woken.append("written"))
    leader.stream.when_stored(5, lambda: woken.append("stored"))
    leader.stream.mark_deleted()
    assert sorted(woken) == ["stored", "written"]


def test_a_stored_offset_is_a_chunk_replication_sends_and_one_copy_commits(
        tmp_path: Path, leader: Leader) -> None:
    woken: list[bool] = []
    leader.stream.when_written(0, lambda: woken.append(True))
    leader.stream.store_offset("reader", 0)
    assert woken == [True], "the tracking chunk goes to the followers as a write does"
    assert leader.stream.commit_end == 0, "a replicated leader waits for its followers"
    single = Stream("one", tmp_path / "one", StreamSettings(), "never", ManualClock())
    single.store_offset("reader", 0)
    assert single.commit_end == single.log.next_offset == 1
    single.close()


def test_fsync_interval_syncs_what_was_written_within_a_second(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With storage.fsync "interval", a chunk written after the log's last sync is synced by a
    timer a second later, even when nothing else is written (before, only a later write did)."""
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "interval", clock)
    synced: list[float] = []
    monkeypatch.setattr(stream.log, "sync", lambda: synced.append(clock.now))
    publisher = Publisher(1, None, stream, FakeSession())
    stream.attach_publisher(publisher)
    stream.publish(publisher, batch(1, [b"a"]))
    clock.advance(0)  # written
    stream.publish(publisher, batch(2, [b"b"]))
    clock.advance(0.5)  # written too: one timer for both
    assert synced == []
    clock.advance(0.6)
    assert len(synced) == 1, "one sync, a second after the first write"
    clock.advance(5)
    assert len(synced) == 1, "nothing written since: no more syncs"
    stream.close()
