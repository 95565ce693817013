"""Subscriptions and single-active-consumer groups through the core's port, in memory: credit,
back-pressure, and hand-over. A manual clock; a fake session records what it is told."""

from __future__ import annotations

from pathlib import Path

from streamlet.core.sac import SacGroups
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Publisher, Stream
from streamlet.core.subscription import Subscription
from tests.support.fakes import FakeSession, ManualClock, batch


def _stream_of_chunks(tmp_path: Path, chunks: int) -> Stream:
    """A stream of ``chunks`` one-message chunks (each written after a quiet spell)."""
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    publisher = Publisher(1, None, stream, FakeSession())
    for i in range(chunks):
        stream.publish(publisher, batch(i + 1, [b"m%d" % i]))
        clock.advance(1)
    assert stream.log.next_offset == chunks
    return stream


def test_a_subscription_delivers_as_many_chunks_as_it_has_credit(tmp_path: Path) -> None:
    stream = _stream_of_chunks(tmp_path, 5)
    session = FakeSession()
    sub = Subscription(session, 7, stream, 0, 2, {})
    sub.pump()
    assert session.delivered == [(7, 2)] and sub.credit == 0
    sub.credit += 10
    sub.pump()
    assert session.delivered == [(7, 2), (7, 3)], "the rest, and no more than there is"
    stream.close()


def test_a_session_that_does_not_read_gets_nothing_until_it_has_room(tmp_path: Path) -> None:
    stream = _stream_of_chunks(tmp_path, 3)
    session = FakeSession()
    session.paused = True
    sub = Subscription(session, 1, stream, 0, 10, {})
    sub.pump()
    assert session.delivered == []
    session.paused = False
    session.room = 0  # not paused yet, but at its high-water mark
    sub.pump()
    assert session.delivered == []
    session.room = 1 << 20
    sub.pump()
    assert session.delivered == [(1, 3)]
    stream.close()


def _two_readers(tmp_path: Path) -> tuple[Stream, tuple[FakeSession, Subscription],
                                          tuple[FakeSession, Subscription]]:
    """One stream, two subscriptions on it, each on its own session."""
    stream = _stream_of_chunks(tmp_path, 1)
    a, b = FakeSession(), FakeSession()
    return stream, (a, Subscription(a, 1, stream, 0, 10, {})), (b, Subscription(b, 1, stream, 0, 10, {}))


def test_a_single_active_consumer_hands_over_only_after_the_active_one_steps_down(
        tmp_path: Path) -> None:
    stream, (a, first), (b, second) = _two_readers(tmp_path)
    groups = SacGroups()
    first.active = second.active = False
    groups.join(first, "app")
    groups.join(second, "app")
    assert a.activations == [(first, True)] and b.activations == []
    assert groups.is_active(first) and not groups.is_active(second)
    groups.leave(first)  # its connection closed
    assert b.activations == [(second, True)] and groups.is_active(second)
    stream.close()


def test_a_partition_group_moves_its_consumer_when_one_joins_and_waits_for_the_step_down(
        tmp_path: Path) -> None:
    stream, (a, first), (b, second) = _two_readers(tmp_path)
    groups = SacGroups()
    groups.join(first, "app", partition_index=1)
    assert a.activations == [(first, True)]
    groups.join(second, "app", partition_index=1)  # partition 1 of 2 members: the second's
    assert a.activations[-1] == (first, False) and not first.active
    assert b.activations == [], "not before the first one's answer"
    groups.stepped_down(first)
    assert b.activations == [(second, True)]
    stream.close()


def test_small_chunks_go_to_the_session_together_and_a_big_one_alone(tmp_path: Path) -> None:
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    publisher = Publisher(1, None, stream, FakeSession())
    sizes = [10, 10, 70_000, 10, 30_000, 30_000, 30_000, 10]  # one message per chunk
    for i, n in enumerate(sizes):
        stream.publish(publisher, batch(i + 1, [b"m" * n]))
        clock.advance(1)
    session = FakeSession()
    Subscription(session, 1, stream, 0, 100, {}).pump()
    # a group of small chunks ends before a big one or with the chunk that takes it to 64 KiB
    assert session.delivered == [(1, 2), (1, 1), (1, 4), (1, 1)]
    stream.close()
