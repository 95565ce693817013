"""The counters the core keeps for the broker's metrics: one addition per chunk, exact values.
In memory, manual clock, a fake session."""

from __future__ import annotations

from pathlib import Path

from streamlet.core.settings import StreamSettings
from streamlet.core.stats import LatencyHistogram
from streamlet.core.streams import Publisher, Stream
from streamlet.core.subscription import Subscription
from tests.support.fakes import FakeSession, ManualClock, batch


def test_a_sample_is_counted_in_the_first_bucket_whose_bound_it_does_not_pass() -> None:
    h = LatencyHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 5.0):
        h.observe(seconds)
    assert h.counts == [2, 1, 1] and h.count == 4 and h.total == 5.0035


def test_counters_and_latency_of_a_stream_with_one_copy(tmp_path: Path) -> None:
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock,
                    LatencyHistogram(now=clock.time))
    session, reader = FakeSession(), FakeSession()
    publisher = Publisher(1, "ref", stream, session)
    stream.attach_publisher(publisher)
    stream.attach_reader(Subscription(reader, 1, stream, 0, 100, {}))
    stream.publish(publisher, batch(1, [b"a", b"bb"]))
    clock.advance(0.002)  # the flush runs 2 ms after the first publish of the chunk
    stream.publish(publisher, batch(2, [b"bb", b"ccc"]))  # id 2 again: a duplicate
    clock.advance(0.003)
    assert stream.messages_in == 3  # the duplicate is not written
    assert stream.bytes_in == 3 * 4 + 1 + 2 + 3  # entries: a 4-byte size and the body
    assert stream.confirmed == 4  # the duplicate is confirmed too
    assert stream.messages_out == 3 and stream.bytes_out > stream.bytes_in
    h = stream.confirm_latency
    assert h.count == 2, "one sample per chunk"
    assert abs(h.total - 0.005) < 1e-9  # each chunk waited from its first publish to its flush
    stream.close()


def test_a_replicated_chunk_is_sampled_at_its_commit(tmp_path: Path) -> None:
    clock = ManualClock()
    shared = LatencyHistogram(now=clock.time)
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock, shared)
    stream.awaits_commit = True
    session = FakeSession()
    publisher = Publisher(1, None, stream, session)
    stream.publish(publisher, batch(1, [b"a"]))
    clock.advance(0.001)
    assert shared.count == 0 and stream.confirmed == 0, "written, not committed"
    clock.advance(0.099)
    stream.commit(stream.log.next_offset)
    assert shared.count == 1 and abs(shared.total - 0.1) < 1e-9
    assert stream.confirmed == 1 and stream.messages_in == 1
    stream.close()
