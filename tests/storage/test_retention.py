"""Retention: whole segments only, never the newest, by size and by age; tracking survives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from streamlet.storage import ChunkRef, LogConfig, StreamLog
from streamlet.storage.chunk import iter_records, simple_entry


def must(ref: ChunkRef | None) -> ChunkRef:
    assert ref is not None
    return ref

def batch(tag: str, n: int = 1) -> bytes:
    return b"".join(simple_entry(f"{tag}-{i}".encode()) for i in range(n))


def segment_ids(d: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in d.glob("*.segment"))


def index_ids(d: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in d.glob("*.index"))


def fill(log: StreamLog, n: int, ts: int | None = None) -> list[int]:
    return [log.append(batch(str(i), 4), 4, 4, timestamp=ts).chunk_id for i in range(n)]


def test_max_bytes_keeps_newest_segments_that_fit(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=2)
    with StreamLog(d, cfg) as log:
        fill(log, 10)  # 5 full segments of 2 chunks
        assert log.segment_count == 5
        seg_size = (d / "00000000000000000000.segment").stat().st_size
        log.reconfigure(dataclasses.replace(cfg, max_bytes=3 * seg_size + 10))
        assert log.apply_retention() == 2
        assert segment_ids(d) == index_ids(d) == [16, 24, 32]
        assert log.size_bytes <= 3 * seg_size + 10
        assert log.first_offset == 16 and log.first_chunk_id == 16
        assert must(log.find_chunk(0)).chunk_id == 16
        assert log.apply_retention() == 0


def test_max_bytes_never_deletes_the_newest(tmp_path: Path) -> None:
    d = tmp_path / "s"
    with StreamLog(d, LogConfig(max_segment_chunks=2, max_bytes=1)) as log:
        fill(log, 7)  # retention at every roll leaves only the active segment
        assert segment_ids(d) == [24]
        assert log.segment_count == 1
        assert log.first_offset == 24 and log.next_offset == 28
        assert [bytes(r) for _, v in log.read_chunks(must(log.find_chunk(0)))
                for r in iter_records(v[48:])] == [b"6-0", b"6-1", b"6-2", b"6-3"]


def test_retention_runs_at_roll_over(tmp_path: Path) -> None:
    d = tmp_path / "s"
    with StreamLog(d, LogConfig(max_segment_chunks=2, max_bytes=1)) as log:
        fill(log, 2)
        assert segment_ids(d) == [0]
        fill(log, 1)  # roll to segment 8, then retention removes segment 0
        assert segment_ids(d) == [8]


def test_max_age_drops_old_segments_oldest_first(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=2)
    with StreamLog(d, cfg) as log:
        for ts in (100, 200, 300, 400, 500, 600, 700):
            log.append(batch(str(ts)), 1, 1, timestamp=ts)
        assert segment_ids(d) == [0, 2, 4, 6]  # last timestamps 200, 400, 600, 700
        log.reconfigure(dataclasses.replace(cfg, max_age_ms=100))
        assert log.apply_retention(now_ms=450) == 1  # 200 < 350; 400 is not
        assert segment_ids(d) == [2, 4, 6]
        assert log.apply_retention(now_ms=10_000) == 2  # everything old, the newest stays
        assert segment_ids(d) == index_ids(d) == [6]
        assert log.first_chunk_id == log.last_chunk_id == 6


def test_age_retention_uses_the_last_chunk_of_a_segment(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=2)
    with StreamLog(d, cfg) as log:
        for ts in (100, 900, 1000):
            log.append(batch(str(ts)), 1, 1, timestamp=ts)
        log.reconfigure(dataclasses.replace(cfg, max_age_ms=500))
        assert log.apply_retention(now_ms=1300) == 0  # segment 0 ends at 900 > 800
        assert log.apply_retention(now_ms=1500) == 1


def test_tracking_survives_deletion_of_its_segments(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=3, max_bytes=1)
    with StreamLog(d, cfg) as log:
        log.append(batch("a"), 1, 1, writer_sequences={"pub-1": 41})  # 0
        log.append(batch("b"), 1, 1, writer_sequences={"pub-2": 7})  # 1
        mark = log.append(batch("c"), 1, 1).chunk_id  # 2: segment 0 is full
        log.store_offset("reader", mark)  # roll: segment 3 = snapshot 3, delta 4
        log.append(batch("d"), 1, 1)  # 5: segment 3 is full
        log.append(batch("e"), 1, 1)  # roll: segment 6 = snapshot 6 (reader 2 < first 3: dropped)
        assert segment_ids(d) == [6]
        assert log.writer_sequences == {"pub-1": 41, "pub-2": 7}
        assert log.offsets == {}
        log.store_offset("reader", 7)  # 8: segment 6 is full
        log.append(batch("f"), 1, 1)  # roll: segment 9 = snapshot 9 keeps reader 7 (>= 6)
        assert segment_ids(d) == [9]
        assert log.offsets == {"reader": 7}
    with StreamLog(d, cfg) as log:  # the state comes back from the snapshot alone
        assert log.writer_sequences == {"pub-1": 41, "pub-2": 7}
        assert log.offsets == {"reader": 7}


def test_snapshot_drops_offsets_below_the_first_offset(tmp_path: Path) -> None:
    # as Osiris does: a stored offset that retention has left behind is forgotten at a roll
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=4, max_bytes=1)
    with StreamLog(d, cfg) as log:
        for i in range(3):
            log.append(batch(str(i)), 1, 1)
        log.store_offset("r", 2)  # 3: segment 0 full
        log.append(batch("x"), 1, 1)  # roll: snapshot 4 keeps r (2 >= first offset 0)
        assert log.offsets == {"r": 2}
        for i in range(2):  # segment 4: snapshot, x, 6, 7
            log.append(batch(str(i)), 1, 1)
        assert log.offsets == {"r": 2}
        log.append(batch("y"), 1, 1)  # roll: first offset is now 4 > 2
        assert log.offsets == {}
    with StreamLog(d, cfg) as log:
        assert log.offsets == {}
