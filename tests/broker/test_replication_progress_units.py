"""What a leader reports of its followers for /metrics, in memory (no socket): in sync while
the link is up and the follower held, at most IN_SYNC_S ago, everything the leader had
written at an earlier look; lag in offsets, chunks and bytes of the leader's log past the
follower's last ack (before one, past where its feed started); the log's span from an offset."""

from __future__ import annotations

from pathlib import Path

from streamlet.broker.replication.leader import IN_SYNC_S, Leader, Progress
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Publisher, Stream
from streamlet.storage import LogConfig, StreamLog
from streamlet.storage.chunk import simple_entry
from streamlet.storage.layout import FILE_HEADER_SIZE
from tests.support.fakes import FakeSession, ManualClock, batch


class Link:
    """A follower's connection that takes nothing (the feed never sends)."""

    closing = False

    def write_room(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        pass

    def write_file(self, head: bytes, fd: int, pos: int, size: int) -> None:
        pass


def _leading(tmp_path: Path) -> tuple[Stream, Leader, Publisher, ManualClock]:
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    leader = Leader(stream, 1, 0, (0, 1, 2))
    pub = Publisher(1, None, stream, FakeSession())
    stream.attach_publisher(pub)
    leader.start()
    return stream, leader, pub, clock


def _publish(stream: Stream, pub: Publisher, clock: ManualClock, first: int, n: int) -> None:
    stream.publish(pub, batch(first, [b"m%d" % i for i in range(n)]))
    clock.advance(0.01)  # the pending chunk is written


def test_progress_moves_caught_up_to_the_mark_an_ack_reaches() -> None:
    p = Progress(caught_up_at=5.0, mark_id=10, mark_at=5.0)
    p.acked(4, 8, tail_id=20, now=6.0)  # short of the mark: nothing proven
    assert (p.caught_up_at, p.mark_id, p.chunk_id, p.next_offset) == (5.0, 10, 4, 8)
    p.acked(12, 15, tail_id=30, now=7.0)  # past it: it held what the leader had at 5.0
    assert (p.caught_up_at, p.mark_id, p.mark_at) == (5.0, 30, 7.0)
    p.acked(30, 33, tail_id=31, now=9.0)
    assert (p.caught_up_at, p.mark_id, p.mark_at) == (7.0, 31, 9.0)
    p.acked(31, 34, tail_id=31, now=20.0)  # the tail itself: caught up now
    assert (p.caught_up_at, p.mark_id, p.mark_at) == (20.0, 31, 20.0)


def test_in_sync_and_lag(tmp_path: Path) -> None:
    stream, leader, pub, clock = _leading(tmp_path)
    assert leader.in_sync(0), "the leader always is"
    assert not leader.in_sync(1) and leader.lag(1) is None, "no link, no ack yet"
    leader.attach(1, Link(), 0)
    leader.attach(2, Link(), 0)
    assert leader.in_sync(1), "a new epoch gives its members IN_SYNC_S to catch up"
    end = stream.log.next_offset
    assert leader.lag(1) == (end, 1, stream.log.span_from(0)[1]), "the epoch's first chunk"
    _publish(stream, pub, clock, 1, 3)
    _, tail_id, tail_end = stream.log.tail()
    leader.on_ack(1, 1, tail_id, tail_end)
    assert leader.lag(1) == (0, 0, 0)
    for i in range(3):
        _publish(stream, pub, clock, 4 + 3 * i, 3)
    behind = leader.lag(2)
    assert behind is not None and behind[0] == stream.log.next_offset and behind[1] == 5
    assert behind[2] == stream.log.size_bytes - FILE_HEADER_SIZE, "one segment: all of it"
    # member 1 keeps acking the tail; member 2 acks nothing more
    clock.advance(IN_SYNC_S + 1)
    _, tail_id, tail_end = stream.log.tail()
    leader.on_ack(1, 1, tail_id, tail_end)
    _publish(stream, pub, clock, 13, 1)
    assert leader.in_sync(1), "it caught up with the tail of its previous ack's look"
    assert not leader.in_sync(2), "behind for longer than IN_SYNC_S"
    _, tail_id, tail_end = stream.log.tail()
    leader.on_ack(2, 1, tail_id, tail_end)
    assert leader.in_sync(2) and leader.lag(2) == (0, 0, 0), "it holds everything now"
    leader.detach(leader.feeds[2].conn)
    assert not leader.in_sync(2), "its link is down"
    stream.close()


def test_span_from_counts_the_chunks_and_their_bytes_across_segments(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", LogConfig(max_segment_bytes=500)) as lg:
        refs = [lg.append(simple_entry(b"m%d" % c) * 3, 3, 3) for c in range(50)]
        assert lg.segment_count > 3
        files = sorted((tmp_path / "s").glob("*.segment"))
        on_disk = [f.stat().st_size - FILE_HEADER_SIZE for f in files]
        assert lg.span_from(lg.first_offset)[1] == sum(on_disk)
        second = int(files[1].name.split(".")[0])  # named by its first chunk id
        assert lg.span_from(second)[1] == sum(on_disk[1:])
        assert lg.span_from(refs[-1].chunk_id) == (1, refs[-1].size)
        assert lg.span_from(refs[-2].chunk_id)[0] in (2, 3), "a roll's snapshot may be between"
        assert lg.span_from(lg.next_offset) == (0, 0)


def test_a_learners_lag_is_kept_but_its_acks_never_count(tmp_path: Path) -> None:
    stream, leader, pub, clock = _leading(tmp_path)
    leader.attach(3, Link(), 0)  # member 3: a learner, outside (0, 1, 2)
    _publish(stream, pub, clock, 1, 3)
    _, tail_id, tail_end = stream.log.tail()
    assert leader.lag(3) == (tail_end, 2, stream.log.span_from(0)[1])
    leader.on_ack(3, 1, tail_id, tail_end)
    assert leader.lag(3) == (0, 0, 0)
    assert 3 not in leader.acks and stream.commit_end == 0, "not counted toward the commit"
    leader.detach(leader.feeds[3].conn)
    assert leader.lag(3) is None, "its link gone: no lag left behind"
    stream.close()
