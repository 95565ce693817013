"""StreamLog.user_run: a run of user chunks' places in one segment file, none of their data
read, for a reader that sends them from the file (Deliver's sendfile): the same chunks
read_chunks would read, at the positions whose bytes read_chunks returns."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from streamlet.storage import ChunkRef, LogConfig, StreamLog
from streamlet.storage.chunk import HEADER_SIZE, simple_entry


def batch(tag: str, n: int) -> bytes:
    return b"".join(simple_entry(f"{tag}-{i}".encode()) for i in range(n))


def file_bytes(log: StreamLog, fd: int, ref: ChunkRef) -> bytes:
    """What a Deliver sends from the file for a chunk without a bloom filter."""
    assert ref.bloom_size == 0
    return os.pread(fd, HEADER_SIZE + ref.data_length, ref.pos)


def test_the_run_read_chunks_would_read_not_read(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", LogConfig(max_segment_chunks=4)) as log:
        refs = [log.append(batch(str(i), 10), 10, 10) for i in range(6)]
        for max_bytes in (1, 2 * refs[0].size, 1 << 20):
            run = log.user_run(refs[0], max_bytes)
            assert run is not None
            read = log.read_chunks(refs[0], max_bytes)
            assert run.refs == [r for r, _ in read]
            assert [file_bytes(log, run.fd, r) for r in run.refs] == [bytes(v) for _, v in read]
            assert (run.pos, run.size) == (refs[0].pos, sum(r.size for r in run.refs))
        run = log.user_run(refs[1])
        assert run is not None and run.refs == refs[1:4]  # stops at the segment's end
        run = log.user_run(refs[0], 1 << 20, max_chunks=2)
        assert run is not None and run.refs == refs[:2] and run.size == 2 * refs[0].size


def test_tracking_chunks_are_left_out_and_spanned(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s") as log:
        a = log.append(batch("a", 1), 1, 1)
        log.store_offset("x", 0)
        b = log.append(batch("b", 1), 1, 1)
        run = log.user_run(a)
        assert run is not None and run.refs == [a, b]
        assert run.size == b.pos + b.size - a.pos


def test_recovered_chunks_learn_their_header_and_bloom(tmp_path: Path) -> None:
    d = tmp_path / "s"
    with StreamLog(d, LogConfig(max_segment_chunks=2)) as log:
        refs = [log.append(batch(str(i), 2), 2, 2, bloom=bytes([i]) * 16 if i % 2 else b"")
                for i in range(6)]
    with StreamLog(d, LogConfig(max_segment_chunks=2)) as log:
        run = log.user_run(refs[2])
        assert run is not None and run.refs == refs[2:4]
        assert [r.bloom_size for r in run.refs] == [0, 16]
        assert file_bytes(log, run.fd, run.refs[0]) == bytes(log.read_chunks(refs[2], 1)[0][1])


def test_a_segment_deleted_under_the_ref(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", LogConfig(max_segment_chunks=2)) as log:
        refs = [log.append(batch(str(i), 1), 1, 1, timestamp=i) for i in range(6)]
        log.reconfigure(dataclasses.replace(log.config, max_age_ms=1))
        assert log.apply_retention(now_ms=3) == 1  # segment 0 goes
        run = log.user_run(refs[0])
        assert run is not None and run.refs == refs[2:4]  # on from the first chunk stored
        assert log.user_run(refs[5]) is not None
