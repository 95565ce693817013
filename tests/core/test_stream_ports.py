"""The stream core through its session ports, in memory: no socket, no broker process. A fake
session records what the stream tells it; the wire codes are the adapter's business."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path
from typing import Any

import pytest

from streamlet.core.ports import Refusal
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Publisher, Stream
from tests.support.fakes import FakeSession, ManualClock, batch


async def test_a_publish_is_confirmed_once_flushed_and_a_repeated_one_is_not_stored_twice(
        tmp_path: Path) -> None:
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", ManualClock())
    session = FakeSession()
    publisher = Publisher(1, "ref", stream, session)
    stream.publishers.add(publisher)
    stream.publish(publisher, batch(1, [b"a", b"b"]))
    stream.flush()
    assert session.confirms == [1, 2]
    stream.publish(publisher, batch(1, [b"a", b"b"]))  # the same ids again (a retry)
    stream.flush()
    assert session.confirms == [1, 2, 1, 2], "a duplicate is confirmed, not stored"
    assert stream.log.next_offset == 2
    stream.close()


async def test_a_sealed_stream_rejects_publishes_as_moved_and_a_deleted_one_as_gone(
        tmp_path: Path) -> None:
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", ManualClock())
    session = FakeSession()
    publisher = Publisher(1, None, stream, session)
    stream.publishers.add(publisher)
    stream.publish(publisher, batch(1, [b"kept"]))
    dropped = stream.seal()
    assert dropped == {publisher} and session.confirms == [1], "pending writes confirmed first"
    stream.publish(publisher, batch(2, [b"late"]))
    assert session.rejects == [(2, Refusal.MOVED)]
    stream.deleted = True
    stream.publish(publisher, batch(3, [b"later"]))
    assert session.rejects[-1] == (3, Refusal.GONE)
    assert stream.log.next_offset == 1
    stream.close()


async def test_detaching_a_publisher_confirms_what_it_sent_first_unless_its_session_is_gone(
        tmp_path: Path) -> None:
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    session, gone = FakeSession(), FakeSession()
    kept, lost = Publisher(1, "a", stream, session), Publisher(2, "b", stream, gone)
    stream.attach_publisher(kept)
    stream.attach_publisher(lost)
    assert stream.reference_taken("a") and not stream.reference_taken("c")
    stream.publish(lost, batch(1, [b"x"], publisher_id=2))
    stream.detach_publisher(lost, confirm_first=False)
    assert gone.confirms == [] and clock.pending == 1, "written on the stream's own time"
    stream.publish(kept, batch(1, [b"y"]))
    stream.detach_publisher(kept)
    assert session.confirms == [1], "confirmed before the detach returns"
    assert stream.publishers == set() and stream.log.next_offset == 2
    stream.close()


def test_a_publisher_that_wants_offsets_is_told_where_each_batch_went(tmp_path: Path) -> None:
    """PublisherSession.placed gives each batch's real offset, also when the chunk's write rolls the
    segment and the roll's tracking snapshot takes the offset the batch would have had, and
    when several publishers share a chunk."""
    from streamlet.storage.chunk import HEADER_SIZE, iter_records

    clock = ManualClock()
    settings = StreamSettings(max_segment_size_bytes=200)
    stream = Stream("s", tmp_path / "s", settings, "never", clock)
    stream.store_offset("reader", 0)  # tracking state: every roll writes a snapshot first
    a, b = FakeSession(), FakeSession()
    pa = Publisher(1, None, stream, a, wants_offsets=True)
    pb = Publisher(2, None, stream, b, wants_offsets=True)
    for i in range(1, 31):
        stream.publish(pa, batch(i, [b"a%d" % i]))
        stream.publish(pb, batch(i, [b"b%d" % i], publisher_id=2))
        clock.advance(1)
    assert stream.log.segment_count > 2, "the writes rolled segments"
    by_offset, offset = {}, 0
    while chunks := stream.fetch(offset, 1 << 30):  # a segment's run at a time
        for ref, view in chunks:
            for k, record in enumerate(iter_records(view[HEADER_SIZE:])):
                by_offset[ref.chunk_id + k] = bytes(record)
        offset = chunks[-1][0].next_offset
    for session, name in ((a, b"a"), (b, b"b")):
        assert len(session.placements) == 30
        for first_id, offset in session.placements:
            assert by_offset[offset] == name + b"%d" % first_id
    stream.close()


@pytest.mark.parametrize(("made", "simple"), [
    (lambda: batch(1, [b"a", b"bc"]), True),  # a Publish split: known simple
    (lambda: dataclasses.replace(batch(1, [b"a", b"bc"]), simple=None), True),  # walked
    # one record in a sub-entry batch: as many entries as records, still not simple
    (lambda: dataclasses.replace(batch(1, [b"a"]), count=1, num_records=1, simple=None,
                                 data=bytes([0x80]) + struct.pack(">HII", 1, 5, 5)
                                 + b"\x00\x00\x00\x01z"), False),
])
def test_a_chunk_is_marked_simple_only_when_every_entry_is(tmp_path: Path,
                                                           made: Any, simple: bool) -> None:
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", ManualClock())
    publisher = Publisher(1, None, stream, FakeSession())
    stream.publishers.add(publisher)
    stream.publish(publisher, made())
    stream.publish(publisher, batch(9, [b"after"]))  # simple, in the same pending chunk
    stream.flush()
    ref = stream.log.find_chunk(0)
    assert ref is not None and ref.simple is simple
