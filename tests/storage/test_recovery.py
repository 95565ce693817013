"""Recovery: torn chunks, bad CRCs, torn or lagging indexes, empty new segments, crashes."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from streamlet.storage import ChunkRef, LogConfig, StorageError, StreamLog
from streamlet.storage.chunk import iter_records, simple_entry

IDX = struct.Struct(">QqQIB")



def must(ref: ChunkRef | None) -> ChunkRef:
    assert ref is not None
    return ref

def batch(tag: str, n: int = 2) -> bytes:
    return b"".join(simple_entry(f"{tag}-{i}".encode()) for i in range(n))


def seg(d: Path, i: int = 0) -> Path:
    return d / f"{i:020d}.segment"


def idx(d: Path, i: int = 0) -> Path:
    return d / f"{i:020d}.index"


def bodies(log: StreamLog) -> list[bytes]:
    out: list[bytes] = []
    ref = log.find_chunk(0)
    while ref is not None:
        got = log.read_chunks(ref)
        out.extend(bytes(b) for _, v in got for b in iter_records(v[48:]))
        ref = log.next_chunk(got[-1][0])
    return out


def index_records(d: Path, i: int = 0) -> list[tuple[int, int, int, int, int]]:
    raw = idx(d, i).read_bytes()
    assert raw[:8] == b"OSII\x00\x00\x00\x01"
    assert (len(raw) - 8) % 29 == 0
    return list(IDX.iter_unpack(raw[8:]))


def write(d: Path, n: int, cfg: LogConfig | None = None, ts: int = 1000) -> list[int]:
    """n chunks of 2 records with writer sequences, fixed timestamps, closed cleanly."""
    with StreamLog(d, cfg or LogConfig()) as log:
        return [log.append(batch(str(i)), 2, 2, writer_sequences={"p": i},
                           timestamp=ts + i).pos for i in range(n)]


def expected_bodies(n: int) -> list[bytes]:
    return [f"{i}-{j}".encode() for i in range(n) for j in range(2)]


def assert_consistent(d: Path, n: int) -> None:
    """The log holds exactly chunks 0..n-1, its index matches, and it accepts appends."""
    with StreamLog(d) as log:
        assert bodies(log) == expected_bodies(n)
        assert log.next_offset == 2 * n
        assert log.writer_sequences == ({"p": n - 1} if n else {})
        recs = index_records(d)
        assert [r[0] for r in recs] == [2 * i for i in range(n)]
        assert [r[1] for r in recs] == [1000 + i for i in range(n)]
        if recs:
            assert recs[-1][3] + must(log.last_chunk()).size == seg(d).stat().st_size
        log.append(batch(str(n)), 2, 2, writer_sequences={"p": n}, timestamp=1000 + n)
    with StreamLog(d) as log:
        assert bodies(log) == expected_bodies(n + 1)


@pytest.mark.parametrize("cut", [1, 20, 47, 48, 49, 60])
def test_torn_last_chunk_is_cut(tmp_path: Path, cut: int) -> None:
    d = tmp_path / "s"
    positions = write(d, 4)
    with open(seg(d), "r+b") as f:
        f.truncate(positions[3] + cut)  # the last chunk is 48 + 14 + 10 bytes long
    assert_consistent(d, 3)


def test_bad_crc_in_last_chunk_drops_it(tmp_path: Path) -> None:
    d = tmp_path / "s"
    positions = write(d, 4)
    with open(seg(d), "r+b") as f:
        f.seek(positions[3] + 48 + 5)
        byte = f.read(1)
        f.seek(positions[3] + 48 + 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert_consistent(d, 3)


def test_bad_header_of_last_chunk_drops_it(tmp_path: Path) -> None:
    d = tmp_path / "s"
    positions = write(d, 3)
    with open(seg(d), "r+b") as f:
        f.seek(positions[2])
        f.write(b"\x00")  # magic byte
    assert_consistent(d, 2)


def test_garbage_after_last_chunk_is_cut(tmp_path: Path) -> None:
    d = tmp_path / "s"
    write(d, 3)
    size = seg(d).stat().st_size
    with open(seg(d), "ab") as f:
        f.write(b"\x50" + os.urandom(100))
    assert_consistent(d, 3)
    assert seg(d).stat().st_size > size  # the new chunk, not the garbage


def test_recovered_files_equal_a_clean_write(tmp_path: Path) -> None:
    clean, torn = tmp_path / "clean", tmp_path / "torn"
    write(clean, 3)
    positions = write(torn, 4)
    with open(seg(torn), "r+b") as f:
        f.truncate(positions[3] + 30)
    StreamLog(torn).close()
    assert seg(torn).read_bytes() == seg(clean).read_bytes()
    assert idx(torn).read_bytes() == idx(clean).read_bytes()


@pytest.mark.parametrize("damage", ["torn-record", "missing", "bad-header", "zeros",
                                    "extra-record", "wrong-pos", "header-only"])
def test_damaged_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "s"
    write(d, 5)
    raw = idx(d).read_bytes()
    if damage == "torn-record":
        idx(d).write_bytes(raw[:-10])
    elif damage == "missing":
        idx(d).unlink()
    elif damage == "bad-header":
        idx(d).write_bytes(b"XXXX" + raw[4:])
    elif damage == "zeros":
        idx(d).write_bytes(raw[: 8 + 29 * 2] + bytes(29 * 3))
    elif damage == "extra-record":
        idx(d).write_bytes(raw + IDX.pack(10, 0, 1, 10_000, 0))
    elif damage == "wrong-pos":
        rec = list(IDX.unpack_from(raw, 8 + 29 * 3))
        rec[3] += 1
        idx(d).write_bytes(raw[: 8 + 29 * 3] + IDX.pack(*rec) + raw[8 + 29 * 4 :])
    else:
        idx(d).write_bytes(raw[:8])
    assert_consistent(d, 5)


def test_orphan_index_is_removed(tmp_path: Path) -> None:
    d = tmp_path / "s"
    write(d, 2)
    shutil.copy(idx(d), idx(d, 77))
    (d / "00000000000000000088.index.tmp").write_bytes(b"x")
    assert_consistent(d, 2)
    assert sorted(p.name for p in d.iterdir()) == [idx(d).name, seg(d).name]


def test_empty_newest_segment_is_removed(tmp_path: Path) -> None:
    # a crash right after a roll, before the new segment's first chunk reached the disk
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=2)
    with StreamLog(d, cfg) as log:
        for i in range(4):
            log.append(batch(str(i)), 2, 2, writer_sequences={"p": i})
        log.store_offset("c", 4)
    # segments: 0 = [0, 2], 4 = [snapshot 4, 5], 7 = [snapshot 7, 8], 10 = [snapshot 10, delta 11]
    assert sorted(int(p.name[:20]) for p in d.glob("*.segment")) == [0, 4, 7, 10]
    with open(seg(d, 10), "r+b") as f:
        f.truncate(8 + 30)  # torn snapshot: the segment holds no whole chunk
    with StreamLog(d, cfg) as log:
        assert sorted(int(p.name[:20]) for p in d.glob("*.segment")) == [0, 4, 7]
        assert log.next_offset == 10
        assert log.writer_sequences == {"p": 3}
        assert log.offsets == {}  # the delta was in the lost segment
        assert bodies(log) == expected_bodies(4)
        log.append(batch("4"), 2, 2)  # segment 7 is full: rolls again to 10
        assert must(log.last_chunk()).segment == 10
    seg(d, 10).unlink()
    idx(d, 10).unlink()
    seg(d, 10).write_bytes(b"OS")  # torn file header
    with StreamLog(d, cfg) as log:
        assert log.next_offset == 10 and log.segment_count == 3
        assert log.writer_sequences == {"p": 3}


def test_torn_file_header_of_the_only_segment(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir()
    seg(d).write_bytes(b"OSI")
    with StreamLog(d) as log:
        assert log.next_offset == 0
        log.append(batch("0"), 2, 2, writer_sequences={"p": 0}, timestamp=1000)
    assert_consistent(d, 1)


def test_not_a_segment_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir()
    seg(d).write_bytes(b"PK\x03\x04 something else entirely")
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(StorageError):
        StreamLog(d)
    assert len(os.listdir("/proc/self/fd")) == fds  # nothing leaked, the lock is released
    seg(d).unlink()
    StreamLog(d).close()


def test_old_segment_with_damaged_index_is_rebuilt_when_read(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=3)
    write(d, 7, cfg)
    raw = idx(d, 0).read_bytes()
    idx(d, 0).write_bytes(raw[:-29])  # lost its last record
    idx(d, 6).unlink()  # an old segment without index
    with StreamLog(d, cfg) as log:
        assert bodies(log) == expected_bodies(7)
        assert must(log.find_chunk(5)).chunk_id == 4
    assert [r[0] for r in index_records(d, 0)] == [0, 2, 4]
    assert [r[0] for r in index_records(d, 6)] == [6, 7, 9]  # snapshot 6 first


CHILD = """
import os, sys
from streamlet.storage.chunk import simple_entry
from streamlet.storage import LogConfig, StreamLog
log = StreamLog(sys.argv[1], LogConfig(max_segment_chunks=int(sys.argv[3])))
for i in range(int(sys.argv[2])):
    log.append(b"".join(simple_entry(f"{i}-{j}".encode()) for j in range(2)), 2, 2,
               writer_sequences={"p": i}, timestamp=1000 + i)
    if i % 7 == 0:
        log.store_offset("c", 2 * i)
os._exit(0)  # no close: buffered index records are lost, as in a crash
"""


@pytest.mark.process
@pytest.mark.parametrize("chunks_per_segment", [1000, 50])
def test_process_crash_loses_nothing_written(tmp_path: Path, chunks_per_segment: int) -> None:
    d = tmp_path / "s"
    n = 300
    subprocess.run([sys.executable, "-c", CHILD, str(d), str(n), str(chunks_per_segment)],
                   check=True, timeout=60)
    with StreamLog(d, LogConfig(max_segment_chunks=chunks_per_segment)) as log:
        assert bodies(log) == expected_bodies(n)
        assert log.writer_sequences == {"p": n - 1}
        assert log.offsets == {"c": 2 * (n - 1 - (n - 1) % 7)}
        last_seg = must(log.last_chunk()).segment
    assert len(index_records(d, last_seg)) > 0
    assert index_records(d, last_seg)[-1][0] == max(r[0] for r in index_records(d, last_seg))


def test_old_segment_index_with_zero_tail_keeps_true_timestamps(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=3)
    with StreamLog(d, cfg) as log:
        for i in range(5):
            log.append(batch(str(i)), 2, 2, timestamp=1000 * (i + 1))
    raw = idx(d, 0).read_bytes()
    idx(d, 0).write_bytes(raw[: 8 + 29] + bytes(29 * 2))  # records 2 and 3 zeroed
    with StreamLog(d, cfg) as log:
        log.reconfigure(LogConfig(max_segment_chunks=3, max_age_ms=1000))
        assert log.apply_retention(now_ms=3500) == 0  # segment 0 ends at 3000, not at 0
        assert log.find_timestamp(2500) == log.find_chunk(4)
        assert bodies(log) == expected_bodies(5)
        assert log.apply_retention(now_ms=4001) == 1
    assert [r[0] for r in index_records(d, 6)] == [6, 8]


def test_index_is_written_at_least_every_4_mb(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = StreamLog(d)
    big = simple_entry(bytes(1 << 20))
    for _ in range(5):
        log.append(big, 1, 1)
    # not closed: 4 records reached the index file once the data passed 4 MB
    assert len(index_records(d)) == 4
    log.close()
    assert len(index_records(d)) == 5


def test_old_segment_index_pointing_into_a_chunk_is_detected(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=4)
    write(d, 6, cfg)
    raw = bytearray(idx(d, 0).read_bytes())
    rec = list(IDX.unpack_from(raw, 8 + 29))
    rec[3] += 3  # the second chunk's position, off by three bytes
    IDX.pack_into(raw, 8 + 29, *rec)
    idx(d, 0).write_bytes(bytes(raw))
    with StreamLog(d, cfg) as log, pytest.raises(StorageError):
        bodies(log)  # never garbage: the header at that position does not match
