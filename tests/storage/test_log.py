"""StreamLog: appending, reading, looking up chunks, rolling segments, tracking state."""

from __future__ import annotations

import dataclasses
import os
import struct
from pathlib import Path

import pytest

from streamlet.storage import ChunkRef, LogConfig, StorageError, StreamLog
from streamlet.storage.chunk import iter_records, simple_entry


def must(ref: ChunkRef | None) -> ChunkRef:
    assert ref is not None
    return ref

def batch(tag: str, n: int) -> bytes:
    return b"".join(simple_entry(f"{tag}-{i}".encode()) for i in range(n))


def records(log: StreamLog, start: int = 0, max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
    """Every (offset, body) from ``start`` on, read the way a subscription reads."""
    out: list[tuple[int, bytes]] = []
    ref = log.find_chunk(start)
    while ref is not None:
        got = log.read_chunks(ref, max_bytes)
        assert got and got[0][0] == ref
        for r, view in got:
            out.extend((r.chunk_id + i, bytes(b)) for i, b in enumerate(iter_records(view[48:])))
        ref = log.next_chunk(got[-1][0])
    return out


def test_empty_log(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s") as log:
        assert (log.first_offset, log.next_offset) == (0, 0)
        assert (log.first_chunk_id, log.last_chunk_id, log.committed_chunk_id) == (-1, -1, -1)
        assert log.find_chunk(0) is None
        assert log.find_timestamp(0) is None
        assert log.last_chunk() is None
        assert log.size_bytes == 8
        assert log.writer_sequences == {} and log.offsets == {}


def test_round_trip_and_reopen(tmp_path: Path) -> None:
    d = tmp_path / "s"
    expected: list[tuple[int, bytes]] = []
    with StreamLog(d, LogConfig(max_segment_bytes=500)) as log:
        for c in range(50):
            n = 1 + c % 4
            ref = log.append(batch(f"c{c}", n), n, n)
            expected.extend((ref.chunk_id + i, f"c{c}-{i}".encode()) for i in range(n))
        assert records(log) == expected
        assert records(log, max_bytes=1) == expected  # one chunk per read
        assert log.segment_count > 3
        state = (log.first_offset, log.next_offset, log.first_chunk_id, log.last_chunk_id)
        last = log.last_chunk()
    with StreamLog(d, LogConfig(max_segment_bytes=500)) as log:
        assert (log.first_offset, log.next_offset, log.first_chunk_id, log.last_chunk_id) == state
        assert log.last_chunk() == last
        assert records(log) == expected
        assert records(log, start=expected[70][0])[0][0] <= expected[70][0]


def test_offsets_are_contiguous_and_match_records(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s") as log:
        refs = [log.append(batch("x", n), n, n) for n in (3, 1, 5)]
        assert [(r.chunk_id, r.num_records) for r in refs] == [(0, 3), (3, 1), (4, 5)]
        assert log.next_offset == 9
        assert [o for o, _ in records(log)] == list(range(9))


def test_sub_batch_entry_counts_its_records(tmp_path: Path) -> None:
    inner = simple_entry(b"a") + simple_entry(b"bb")
    sub = bytes([0x80]) + (2).to_bytes(2, "big") + len(inner).to_bytes(4, "big") \
        + len(inner).to_bytes(4, "big") + inner
    with StreamLog(tmp_path / "s") as log:
        ref = log.append(sub + simple_entry(b"c"), 2, 3)
        assert (ref.num_records, log.next_offset) == (3, 3)
        assert records(log) == [(0, b"a"), (1, b"bb"), (2, b"c")]


def test_find_chunk(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", LogConfig(max_segment_chunks=3)) as log:
        a = log.append(batch("a", 4), 4, 4)  # offsets 0-3
        log.store_offset("c", 2)  # 4 (tracking)
        b = log.append(batch("b", 2), 2, 2)  # 5-6; segment 0 is full after this
        log.store_offset("c", 5)  # snapshot 7 opens segment 7, delta 8
        c = log.append(batch("c", 3), 3, 3)  # 9-11
        assert log.segment_count == 2 and c.segment == 7
        for off, want in [(0, a), (3, a), (4, b), (5, b), (6, b), (7, c), (8, c), (9, c),
                          (11, c), (-5, a)]:
            assert log.find_chunk(off) == want, off
        assert log.find_chunk(12) is None
        assert log.find_chunk(10**9) is None
        # segment 7 is full (snapshot, delta, c): snapshot 12 opens segment 12, delta 13;
        # trailing tracking chunks have no user chunk after them
        log.store_offset("c", 9)
        assert log.next_offset == 14 and log.segment_count == 3
        assert log.find_chunk(12) is None and log.find_chunk(13) is None
        assert log.find_chunk(11) == c


def test_next_chunk_skips_tracking_and_crosses_segments(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", LogConfig(max_segment_chunks=2)) as log:
        refs = []
        for i in range(6):
            refs.append(log.append(batch(str(i), 2), 2, 2, writer_sequences={"w": i}))
            log.store_offset("c", refs[-1].chunk_id)
        assert log.segment_count >= 4
        walked = [must(log.find_chunk(0))]
        while (n := log.next_chunk(walked[-1])) is not None:
            walked.append(n)
        assert walked == refs
        assert log.last_chunk() == refs[-1]
        assert log.next_chunk(refs[-1]) is None
        new = log.append(batch("new", 1), 1, 1)
        assert log.next_chunk(refs[-1]) == new  # a tailing reader sees the new chunk


def test_find_timestamp(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", LogConfig(max_segment_chunks=3)) as log:
        refs = [log.append(batch(str(t), 1), 1, 1, timestamp=t) for t in
                (1000, 2000, 2000, 3000, 4000, 5000, 6000)]
        assert log.segment_count == 3
        assert log.find_timestamp(0) == refs[0]
        assert log.find_timestamp(1000) == refs[0]
        assert log.find_timestamp(1001) == refs[1]
        assert log.find_timestamp(2000) == refs[1]
        assert log.find_timestamp(3500) == refs[4]  # across a segment boundary
        assert log.find_timestamp(6000) == refs[6]
        assert log.find_timestamp(6001) is None


def test_find_timestamp_skips_tracking_chunks(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s") as log:
        log.append(batch("a", 1), 1, 1, timestamp=1000)
        log.store_offset("c", 0)  # timestamped now: far later than 1000
        b = log.append(batch("b", 1), 1, 1, timestamp=must(log.last_chunk()).timestamp + 10**12)
        assert log.find_timestamp(2000) == b


def test_read_chunks_respects_max_bytes_and_segment_end(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", LogConfig(max_segment_chunks=4)) as log:
        refs = [log.append(batch(str(i), 10), 10, 10) for i in range(6)]
        size = refs[0].size
        assert [r for r, _ in log.read_chunks(refs[0], 1)] == refs[:1]
        assert [r for r, _ in log.read_chunks(refs[0], 2 * size)] == refs[:2]
        assert [r for r, _ in log.read_chunks(refs[0], 2 * size + 1)] == refs[:2]
        assert [r for r, _ in log.read_chunks(refs[1])] == refs[1:4]  # stops at segment end
        assert [r for r, _ in log.read_chunks(refs[4])] == refs[4:]


def test_read_chunks_skips_tracking_in_the_run(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s") as log:
        a = log.append(batch("a", 1), 1, 1)
        log.store_offset("x", 0)
        log.store_offset("y", 0)
        b = log.append(batch("b", 1), 1, 1)
        got = log.read_chunks(a)
        assert [r for r, _ in got] == [a, b]
        assert [bytes(x) for x in iter_records(got[1][1][48:])] == [b"b-0"]


def test_roll_by_size_follows_osiris(tmp_path: Path) -> None:
    # a segment rolls before a write once it holds >= max bytes and at least two chunks
    d = tmp_path / "s"
    with StreamLog(d, LogConfig(max_segment_bytes=100)) as log:
        refs = [log.append(batch(str(i), 20), 20, 20) for i in range(5)]
        assert refs[0].size > 100
        assert [r.segment for r in refs] == [0, 0, 40, 40, 80]
    names = sorted(p.name for p in d.iterdir())
    assert names == [f"{i:020d}.{ext}" for i in (0, 40, 80) for ext in ("index", "segment")]


def test_roll_by_chunk_count(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", LogConfig(max_segment_chunks=3)) as log:
        refs = [log.append(batch(str(i), 1), 1, 1) for i in range(10)]
        assert [r.segment for r in refs] == [0, 0, 0, 3, 3, 3, 6, 6, 6, 9]
        assert log.segment_count == 4
        assert log.size_bytes == sum(
            os.path.getsize(tmp_path / "s" / f"{i:020d}.segment") for i in (0, 3, 6, 9))


def test_writer_sequences_and_offsets_survive_restart(tmp_path: Path) -> None:
    d = tmp_path / "s"
    with StreamLog(d) as log:
        log.append(batch("a", 2), 2, 2, writer_sequences={"p1": 5, "p2": 9})
        log.append(batch("b", 1), 1, 1, writer_sequences={"p1": 6})
        log.store_offset("cons", 1)
        log.store_offset("cons", 2)
        log.store_offset("other", 0)
        assert log.writer_sequences == {"p1": 6, "p2": 9}
        assert log.offsets == {"cons": 2, "other": 0}
    with StreamLog(d) as log:
        assert log.writer_sequences == {"p1": 6, "p2": 9}
        assert log.offsets == {"cons": 2, "other": 0}


def test_tracking_survives_restart_across_segments(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=2)
    with StreamLog(d, cfg) as log:
        for i in range(7):
            log.append(batch(str(i), 1), 1, 1, writer_sequences={f"p{i % 3}": i})
            log.store_offset(f"c{i % 2}", i)
        seqs, offs = dict(log.writer_sequences), dict(log.offsets)
        assert log.segment_count > 3
    with StreamLog(d, cfg) as log:
        assert log.writer_sequences == seqs == {"p0": 6, "p1": 4, "p2": 5}
        assert log.offsets == offs == {"c0": 6, "c1": 5}


def test_snapshot_keeps_the_most_recent_writers(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=5, max_writer_sequences=3)
    with StreamLog(d, cfg) as log:
        for i in range(5):
            log.append(batch(str(i), 1), 1, 1, writer_sequences={f"w{i}": i})
        assert len(log.writer_sequences) == 5
        log.append(batch("x", 1), 1, 1)  # roll: snapshot keeps w2, w3, w4
        assert log.writer_sequences == {"w2": 2, "w3": 3, "w4": 4}
    with StreamLog(d, cfg) as log:
        assert log.writer_sequences == {"w2": 2, "w3": 3, "w4": 4}


def test_bad_arguments_write_nothing(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s") as log:
        with pytest.raises(ValueError):
            log.append(b"", 0, 0)
        with pytest.raises(ValueError):
            log.store_offset("x" * 256, 1)
        with pytest.raises(ValueError):  # bloom size is a u8
            log.append(batch("a", 1), 1, 1, bloom=b"b" * 256)
        with pytest.raises(ValueError):  # NumEntries is a u16
            log.append(batch("a", 1), 70_000, 70_000)
        with pytest.raises(ValueError):
            log.append(batch("a", 1), 1, 1, writer_sequences={"w" * 300: 1})
        assert log.next_offset == 0 and log.size_bytes == 8
        log.append(batch("a", 1), 1, 1)
        assert records(log) == [(0, b"a-0")]


@pytest.mark.parametrize("mode", ["chunk", "interval"])
def test_fsync_modes(tmp_path: Path, mode: str) -> None:
    d = tmp_path / "s"
    with StreamLog(d, LogConfig(fsync=mode, max_segment_chunks=2)) as log:
        for i in range(5):
            log.append(batch(str(i), 1), 1, 1)
        log.store_offset("c", 1)
        log.sync()
    with StreamLog(d) as log:
        assert [b for _, b in records(log)] == [f"{i}-0".encode() for i in range(5)]
        assert log.offsets == {"c": 1}


def test_bad_config() -> None:
    with pytest.raises(ValueError):
        LogConfig(fsync="always")
    with pytest.raises(ValueError):
        LogConfig(max_segment_chunks=0)


def test_old_segments_load_lazily_with_bloom(tmp_path: Path) -> None:
    d = tmp_path / "s"
    with StreamLog(d, LogConfig(max_segment_chunks=2)) as log:
        refs = [log.append(batch(str(i), 2), 2, 2, bloom=bytes([i]) * 16) for i in range(6)]
    with StreamLog(d, LogConfig(max_segment_chunks=2)) as log:
        assert log.find_chunk(refs[1].chunk_id) == refs[1]
        got = log.read_chunks(refs[0])
        assert [r for r, _ in got] == refs[:2]
        assert [bytes(b) for b in iter_records(got[1][1][48:])] == [b"1-0", b"1-1"]
        assert log.read_bloom(refs[3]) == bytes([3]) * 16
        assert log.next_chunk(refs[1]) == refs[2]


def test_next_chunk_after_retention_of_its_segment(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", LogConfig(max_segment_chunks=2)) as log:
        refs = [log.append(batch(str(i), 1), 1, 1, timestamp=i) for i in range(6)]
        log.reconfigure(dataclasses.replace(log.config, max_age_ms=1))  # with an explicit clock
        assert log.apply_retention(now_ms=3) == 1  # segment 0 (last ts 1 < 2) goes
        assert log.first_offset == 2 and log.first_chunk_id == 2
        assert log.next_chunk(refs[0]) == refs[2]
        assert [r for r, _ in log.read_chunks(refs[1])] == refs[2:4]
        stale = ChunkRef(0, 1, 0, 0, 0, 8, refs[0].size, 0, refs[0].data_length)
        assert log.find_chunk(0) == refs[2]
        assert log.read_chunks(stale)[0][0] == refs[2]


def test_delete_removes_the_directory(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s")
    log.append(batch("a", 1), 1, 1)
    log.delete()
    assert not (tmp_path / "s").exists()


def test_one_writer_per_directory(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = StreamLog(d)
    with pytest.raises(StorageError):
        StreamLog(d)
    log.close()
    StreamLog(d).close()


def test_the_log_knows_which_chunks_it_wrote_hold_simple_entries_only(tmp_path: Path) -> None:
    """ChunkRef.simple: true for a chunk appended here with simple entries only (SBP sends
    those from the file as they are); false with a sub-entry batch (even of one record, as
    many entries as records), and for every chunk once the log is opened again (unknown)."""
    one_record_batch = bytes([0x80]) + struct.pack(">HII", 1, 5, 9) + simple_entry(b"hello")
    with StreamLog(tmp_path / "s") as log:
        simple = log.append([simple_entry(b"a"), simple_entry(b"bc")], 2, 2)
        batched = log.append(simple_entry(b"x") + one_record_batch, 2, 2)
        torn = log.append([simple_entry(b"y") + simple_entry(b"z")], 2, 3)
        assert (simple.simple, batched.simple, torn.simple) == (True, False, False)
        found = [log.find_chunk(r.chunk_id) for r in (simple, batched, torn)]
        assert [r.simple for r in found if r is not None] == [True, False, False]
    with StreamLog(tmp_path / "s") as log:
        again = log.find_chunk(0)
        assert again == simple and again is not None and not again.simple
