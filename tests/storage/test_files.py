"""Descriptors of read segments are bounded (a process-wide LRU)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamlet.storage import LogConfig, StreamLog
from streamlet.storage.chunk import simple_entry
from streamlet.storage.files import FileCache, files
from tests.support.reading import log_records


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_cache() -> Iterator[FileCache]:
    before = files.limit
    files.set_limit(8)
    yield files
    files.set_limit(before)


def test_reading_many_segments_keeps_few_descriptors(tmp_path: Path, small_cache: FileCache) -> None:
    bodies = [b"m%d" % i for i in range(400)]
    with StreamLog(tmp_path / "s", LogConfig(max_segment_bytes=1)) as log:
        for b in bodies:
            log.append(simple_entry(b), 1, 1, writer_sequences={"p": 1})
        assert log.segment_count >= 150
        base = open_fds()
        assert log_records(log) == bodies
        assert open_fds() - base <= 8
        assert len(small_cache) <= 8
        # twice, and backwards in segment order: files the cache closed are opened again
        assert log_records(log) == bodies
        first = log.find_chunk(0)
        assert first is not None
        assert bytes(log.read_chunks(first)[0][1][48:]).endswith(b"m0")
        assert open_fds() - base <= 8
    with StreamLog(tmp_path / "s", LogConfig(max_segment_bytes=1)) as log:  # recovery too
        base = open_fds()
        assert log_records(log) == bodies
        assert open_fds() - base <= 8
    assert len(small_cache) == 0  # closing the log gave its descriptors back


def test_the_cache_gives_descriptors_back_when_the_process_runs_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = FileCache(4)
    closed: list[int] = []

    class Owner:
        def __init__(self, i: int) -> None:
            self.i = i

        def drop_fd(self) -> None:
            closed.append(self.i)

    for i in range(4):
        cache.add(Owner(i))
    real_open, calls = os.open, [0]

    def emfile_twice(path: object, flags: int, mode: int = 0o777) -> int:
        calls[0] += 1
        if calls[0] <= 2:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", emfile_twice)
    fd = cache.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    os.close(fd)
    assert closed == [0, 1, 2]  # the least recently used first: half, then half of the rest
    cache.set_limit(4)
    monkeypatch.setattr(os, "open", lambda *a: (_ for _ in ()).throw(OSError(errno.EMFILE, "x")))
    cache.release()
    with pytest.raises(OSError):  # nothing left to give back: the error is raised
        cache.open(tmp_path / "g", os.O_RDWR | os.O_CREAT)


def test_an_open_log_holds_two_descriptors(tmp_path: Path) -> None:
    # its directory's lock and the segment it appends to; the index is opened when written
    base = open_fds()
    logs = [StreamLog(tmp_path / f"s{i}", LogConfig(max_segment_chunks=2)) for i in range(20)]
    try:
        for log in logs:
            for i in range(30):  # index records written, and 15 rolls
                log.append(simple_entry(b"m%d" % i), 1, 1, writer_sequences={"p": i + 1})
        assert open_fds() - base == 2 * len(logs)
    finally:
        for log in logs:
            log.close()
    assert open_fds() == base
    for i in range(20):  # recovery leaves the same two
        logs[i] = StreamLog(tmp_path / f"s{i}", LogConfig(max_segment_chunks=2))
    try:
        assert open_fds() - base == 2 * len(logs)
        assert len(log_records(logs[0])) == 30
    finally:
        for log in logs:
            log.close()
