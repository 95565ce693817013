"""The stream registry's own decisions, in memory: a create refused when the process's
descriptors (as the broker's Descriptors port reports them) would not hold it, and a stream's
creation stamped with the Clock's wall time. No socket, no broker process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamlet.core.registry import FD_RESERVE, FDS_PER_STREAM, LimitReached, Limits, Streams
from streamlet.core.settings import StreamSettings
from streamlet.storage.files import files
from tests.support.fakes import ManualClock


class FixedDescriptors:
    """The Descriptors port with fixed answers."""

    def __init__(self, answer: tuple[int, int] | None) -> None:
        self.answer = answer

    def descriptors(self) -> tuple[int, int] | None:
        return self.answer


#: what a create needs besides the descriptors already open
NEED = FDS_PER_STREAM + max(files.limit - len(files), 0) + FD_RESERVE


@pytest.mark.parametrize("answer, more, refused", [
    (None, 1, False),  # unknown or unlimited: not checked
    ((10, 10 + NEED), 1, False),  # exactly fits
    ((11, 10 + NEED), 1, True),  # one descriptor short
    ((10, 10 + NEED), 2, True),  # a super stream's two partitions: the second does not fit
    ((10, 10 + NEED + FDS_PER_STREAM), 2, False),
])
def test_a_create_fits_in_the_descriptors_the_broker_reports(
        answer: tuple[int, int] | None, more: int, refused: bool) -> None:
    limits = Limits(descriptors=FixedDescriptors(answer))
    if refused:
        with pytest.raises(LimitReached, match="RLIMIT_NOFILE"):
            limits.check(more, "create")
    else:
        limits.check(more, "create")


def test_max_streams_is_checked_before_the_descriptors(tmp_path: Path) -> None:
    limits = Limits(max_streams=1, descriptors=FixedDescriptors((10, 10 + NEED)))
    streams = Streams(tmp_path, ManualClock(), limits=limits)
    streams.create("a", StreamSettings())
    with pytest.raises(LimitReached, match="max_streams"):
        streams.create("b", StreamSettings())
    streams.close()


def test_a_stream_is_stamped_with_the_clocks_wall_time(tmp_path: Path) -> None:
    clock = ManualClock(now=5.0)
    streams = Streams(tmp_path, clock)
    stream = streams.create("s", StreamSettings())
    doc = json.loads((stream.directory / "stream.json").read_bytes())
    assert doc["created"] == int((clock.epoch + 5.0) * 1000)
    streams.close()
