"""The leader's side of replication in memory (no socket): a follower that becomes leader
deduplicates by what its log took from the old leader; the commit waits for the epoch's first
chunk and a majority of this epoch's acks."""

from __future__ import annotations

from pathlib import Path

from streamlet.broker.replication.leader import Leader
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Publisher, Stream
from tests.support.fakes import FakeSession, ManualClock, batch


def _stream(root: Path, name: str, clock: ManualClock) -> Stream:
    return Stream("s", root / name, StreamSettings(), "never", clock)


def test_a_follower_made_leader_deduplicates_by_the_sequences_its_log_took(tmp_path: Path) -> None:
    clock = ManualClock()
    old, follower = _stream(tmp_path, "old", clock), _stream(tmp_path, "new", clock)
    app = Publisher(1, "app", old, FakeSession())
    old.attach_publisher(app)
    old.publish(app, batch(1, [b"a", b"b", b"c"]))
    clock.advance(1)
    raw = b"".join(bytes(view) for _ref, view in old.log.read_raw(0))
    follower.log.accept_chunks(raw)
    follower.appended()
    Leader(follower, 2, 1, (1,)).start()  # elected; alone, so it commits on its own
    session = FakeSession()
    resent = Publisher(1, "app", follower, session)
    follower.attach_publisher(resent)
    follower.publish(resent, batch(2, [b"b", b"c", b"d"]))  # ids 2 and 3 were stored already
    clock.advance(1)
    assert sorted(session.confirms) == [2, 3, 4]
    assert follower.log.tail()[2] == 5, "a, b, c, the epoch's snapshot, then d only"
    old.close()
    follower.close()


def test_the_commit_waits_for_the_epochs_first_chunk_on_a_majority(tmp_path: Path) -> None:
    clock = ManualClock()
    stream = _stream(tmp_path, "s", clock)
    leader = Leader(stream, 3, 0, (0, 1, 2))
    session = FakeSession()
    pub = Publisher(1, None, stream, session)
    stream.attach_publisher(pub)
    leader.start()
    start = leader.epoch_start
    assert start is not None
    stream.publish(pub, batch(1, [b"x"]))
    clock.advance(1)
    _, tail_id, tail_end = stream.log.tail()
    leader.on_ack(1, 2, tail_id, tail_end)  # another epoch's ack: never counted
    assert session.confirms == [] and stream.commit_end == 0
    leader.on_ack(9, 3, tail_id, tail_end)  # not a member
    assert session.confirms == []
    leader.on_ack(1, 3, start, start + 1)  # the epoch's first chunk on a majority
    assert session.confirms == [] and stream.commit_end == start + 1
    leader.on_ack(2, 3, tail_id, tail_end)
    assert session.confirms == [1] and stream.commit_end == tail_end
    stream.close()
