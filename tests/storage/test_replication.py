"""Replication, storage side: epochs, whole raw chunks copied to followers (read_raw,
accept_chunks) and truncation by the leader's epoch vector (truncate_to, Osiris init_acceptor).
After quiescence every member's .segment and .index files are byte-identical."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

import streamlet.storage.log as log_mod
from streamlet.storage import (
    InvalidChunk,
    LogAhead,
    LogConfig,
    OutOfOrderChunk,
    StaleEpoch,
    StreamLog,
)
from streamlet.storage.chunk import (
    CHUNK_TRACKING_SNAPSHOT,
    CHUNK_USER,
    encode_chunk,
    simple_entry,
)
from tests.support.reading import log_records

# small segments: every scenario crosses several rolls, with tracking snapshots
CFG = LogConfig(max_segment_bytes=400)


def files(log: StreamLog) -> dict[str, bytes]:
    """The log's segment and index files, index records written out first."""
    log.sync()
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir())
            if p.suffix in (".segment", ".index")}


def state(log: StreamLog) -> dict[str, Any]:
    return {
        "tail": log.tail(), "vector": log.epoch_vector(), "first": log.first_offset,
        "first_user": log.first_chunk_id, "last_user": log.last_chunk_id,
        "sequences": dict(log.writer_sequences), "offsets": dict(log.offsets),
        "timestamps": dict(log.stored_timestamps), "records": log_records(log),
    }


def copy(leader: StreamLog, follower: StreamLog, max_bytes: int = 1 << 20,
         rounds: int | None = None, one_by_one: bool = False) -> int:
    """Fetch from the leader what the follower lacks, as a follower's fetch loop would."""
    n = 0
    while rounds is None or rounds > 0:
        got = leader.read_raw(follower.next_offset, max_bytes)
        if not got:
            break
        if one_by_one:
            for _ref, raw in got:
                follower.accept_chunk(bytes(raw))
                n += 1
        else:
            n += follower.accept_chunks(b"".join(raw for _ref, raw in got))
        if rounds is not None:
            rounds -= 1
    return n


def join(leader: StreamLog, follower: StreamLog, **kw: Any) -> int:
    """Hello: truncate by the leader's vector, then fetch everything."""
    start = follower.truncate_to(leader.epoch_vector(), leader.first_offset)
    assert start == follower.next_offset
    copy(leader, follower, **kw)
    return start


def write(log: StreamLog, n: int, tag: str, rng: random.Random | None = None) -> None:
    rng = rng or random.Random(n)
    for i in range(n):
        body = f"{tag}-{i}".encode() * rng.randint(1, 4)
        log.append(simple_entry(body), 1, 1, writer_sequences={f"p{i % 3}": i})
        if i % 7 == 3:
            log.store_offset(f"c-{tag}", log.next_offset - 1)


def test_epochs_in_headers_index_and_state(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", CFG) as log:
        assert log.epoch == 1 and log.tail() == (0, -1, 0) and log.epoch_vector() == []
        write(log, 5, "a")
        ref = log.open_epoch(4)
        assert ref.chunk_type == CHUNK_TRACKING_SNAPSHOT and ref.epoch == 4 and log.epoch == 4
        last_user = log.append(simple_entry(b"x"), 1, 1)
        assert last_user.epoch == 4
        log.store_offset("c", 1)  # a tracking chunk ends the log
        vector = log.epoch_vector()
        assert [e for e, _ in vector] == [1, 4] and vector[1][1] == log.next_offset - 1
        assert log.tail() == (4, log.next_offset - 1, log.next_offset)
        assert log.last_chunk_id == last_user.chunk_id < log.tail()[1]
        with pytest.raises(StaleEpoch):
            log.open_epoch(3)
        before = state(log)
    with StreamLog(tmp_path / "s", CFG) as log:  # recovery reads epochs back
        assert state(log) == before and log.epoch == 4
        refs = log.read_raw(0, 1 << 30)
        assert refs and all(r.epoch == 1 for r, _ in refs)


def test_read_raw_returns_whole_chunks_of_every_type_within_a_segment(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "s", CFG) as log:
        write(log, 30, "a")
        assert log.segment_count > 2
        offset, seen = 0, []
        while got := log.read_raw(offset, 1):
            assert len(got) == 1  # at least one, even over max_bytes
            ref, raw = got[0]
            assert len(raw) == ref.size and raw[0] == 0x50 and raw[1] == ref.chunk_type
            seen.append(ref.chunk_id)
            offset = ref.next_offset
        assert seen == list(range(log.next_offset))  # every chunk: user and tracking
        runs = log.read_raw(0, 1 << 30)
        assert {r.segment for r, _ in runs} == {0}  # never crosses a segment
        middle = runs[1][0]
        assert log.read_raw(middle.chunk_id)[0][0] == middle
        assert log.read_raw(log.next_offset) == []


def test_raw_run_names_the_bytes_read_raw_reads(tmp_path: Path) -> None:
    """A leader sends ``raw_run``'s file range with sendfile, or reads ``read_raw``'s: the
    same chunks and bytes, every type, run by run."""
    with StreamLog(tmp_path / "s", CFG) as log:
        write(log, 30, "a")
        for max_bytes in (1, 150, 1 << 30):
            offset = 0
            while got := log.read_raw(offset, max_bytes):
                run = log.raw_run(offset, max_bytes)
                assert run is not None
                assert run.refs == [ref for ref, _ in got]
                assert os.pread(run.fd, run.size, run.pos) == b"".join(bytes(v) for _, v in got)
                offset = got[-1][0].next_offset
            assert offset == log.next_offset and log.raw_run(offset, max_bytes) is None


def test_append_of_parts_writes_what_append_of_their_join_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batches of a chunk are written as they came (one writev, CRC over the parts), or
    joined past what one writev takes: the files are byte-identical to a joined append."""
    # a new segment opens with a tracking snapshot stamped with the clock: one clock for both
    monkeypatch.setattr(log_mod, "_now_ms", lambda: 1_700_000_000_000)
    entries = [simple_entry(bytes([i]) * (i % 7 + 1)) for i in range(40)]
    for limit in (1000, 5):
        old = log_mod._MAX_PARTS
        log_mod._MAX_PARTS = limit
        try:
            with StreamLog(tmp_path / f"p{limit}", CFG) as parts, \
                    StreamLog(tmp_path / f"j{limit}", CFG) as joined:
                for n in range(1, 12):
                    chunk = entries[:n]
                    kw: dict[str, Any] = {"timestamp": 1000 + n,
                                          "writer_sequences": {"w": n}}
                    parts.append(chunk, n, n, **kw)
                    joined.append(b"".join(chunk), n, n, **kw)
                assert files(parts) == files(joined)
        finally:
            log_mod._MAX_PARTS = old


def test_t4_diverged_replica(tmp_path: Path) -> None:
    """Osiris' diverged_replica: epoch 1 on all, epoch 2 on a lone leader A, epoch 3 written
    by B with C following; A rejoins: its epoch-2 chunks go, all files end identical."""
    a, b, c = (StreamLog(tmp_path / n, CFG) for n in "abc")
    try:
        write(a, 25, "e1")
        copy(a, b)
        copy(a, c, max_bytes=200)
        end_of_1 = a.next_offset
        a.open_epoch(2)
        write(a, 20, "e2")  # never replicated: uncommitted
        assert a.segment_count > b.segment_count  # the cut crosses segments
        b.open_epoch(3)
        write(b, 15, "e3")
        assert join(b, c) == end_of_1
        assert join(b, a, one_by_one=True) == end_of_1  # cut right after epoch 1
        assert a.epoch_vector() == b.epoch_vector() == c.epoch_vector()
        assert [e for e, _ in b.epoch_vector()] == [1, 3]
        assert files(a) == files(b) == files(c)
        assert state(a) == state(b) == state(c)
        assert not any(r.startswith(b"e2") for r in log_records(a))
        expected = state(b)
    finally:
        for log in (a, b, c):
            log.close()
    for n in "abc":  # recovery gives the same state
        with StreamLog(tmp_path / n, CFG) as log:
            assert state(log) == expected


def test_leader_and_follower_roll_at_the_same_chunks(tmp_path: Path) -> None:
    for cfg in (LogConfig(max_segment_chunks=1), LogConfig(max_segment_chunks=2),
                LogConfig(max_segment_bytes=1), LogConfig(max_segment_bytes=250)):
        d = tmp_path / str(len(list(tmp_path.iterdir())))
        with StreamLog(d / "l", cfg) as leader, StreamLog(d / "f", cfg) as follower:
            leader.open_epoch(1)  # a snapshot as the very first chunk
            for step in range(12):
                write(leader, 3, f"s{step}")
                if step % 4 == 1:
                    leader.open_epoch(leader.epoch + 1)
                copy(leader, follower, max_bytes=random.Random(step).choice([1, 300, 1 << 20]))
            assert leader.segment_count > 3
            assert files(leader) == files(follower)
            assert state(leader) == state(follower)


@pytest.mark.parametrize("case", ["no_overlap", "leader_first_above_overlapping",
                                  "leader_first_above_past_local_end", "empty_leader"])
def test_truncation_against_a_leader_whose_old_segments_are_gone(tmp_path: Path,
                                                                 case: str) -> None:
    """osiris#43 (no overlap: the log is really emptied and starts at the leader's first
    offset) and osiris#42 (the leader's first offset is above the replica's)."""
    with StreamLog(tmp_path / "l", CFG) as leader, StreamLog(tmp_path / "f", CFG) as f:
        if case == "empty_leader":
            write(f, 10, "x")
            leader.truncate_to([], 57)  # an empty leader log whose next offset is 57
            assert leader.next_offset == 57
        else:
            write(leader, 10, "e1")
            copy(leader, f)
            if case == "no_overlap":
                leader.open_epoch(2)
            write(leader, 40 if case == "leader_first_above_overlapping" else 60, "more")
            f_next = f.next_offset
            first_seg = (leader.directory / f"{0:020d}.segment").stat().st_size
            keep = leader.size_bytes - first_seg if case.endswith("overlapping") else 1200
            leader.reconfigure(LogConfig(max_segment_bytes=400, max_bytes=keep))
            leader.apply_retention()
            if case == "leader_first_above_overlapping":
                assert 0 < leader.first_offset <= f_next
            else:
                assert leader.first_offset > f_next
            if case == "no_overlap":
                assert [e for e, _ in leader.epoch_vector()] == [2]
        start = f.truncate_to(leader.epoch_vector(), leader.first_offset)
        if case == "leader_first_above_overlapping":
            assert start == f_next and f.first_offset == 0  # kept, catches up
        else:
            assert start == leader.first_offset and f.tail() == (0, -1, start)
            assert sorted(p.name for p in f.directory.iterdir()
                          if p.suffix == ".segment") == [f"{start:020d}.segment"]
        copy(leader, f)
        lf, ff = files(leader), files(f)
        assert {n: ff[n] for n in lf} == lf  # the follower may still hold older segments
        assert f.tail() == leader.tail() and f.epoch_vector()[-1:] == leader.epoch_vector()[-1:]
        assert f.writer_sequences == leader.writer_sequences
        before = state(f)
    with StreamLog(tmp_path / "f", CFG) as f2:
        assert state(f2) == before


def test_an_emptied_log_reopens_at_the_leaders_first_offset(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "f", CFG) as f:
        write(f, 10, "x")
        assert f.truncate_to([(5, 900)], 800) == 800
        assert f.first_offset == f.next_offset == 800 and f.writer_sequences == {}
        assert f.offsets == {} and f.last_chunk_id == -1
    with StreamLog(tmp_path / "f", CFG) as f:
        assert f.tail() == (0, -1, 800)


def _leader_and_follower(tmp_path: Path) -> tuple[StreamLog, StreamLog]:
    leader, f = StreamLog(tmp_path / "l", CFG), StreamLog(tmp_path / "f", CFG)
    write(leader, 8, "a")
    copy(leader, f)
    write(leader, 3, "b")
    return leader, f


def _raw(log: StreamLog, offset: int) -> bytes:
    return bytes(log.read_raw(offset)[0][1])


def _corrupt(raw: bytes, at: int) -> bytes:
    b = bytearray(raw)
    b[at] ^= 0xFF
    return bytes(b)


@pytest.mark.parametrize("name, make, error", [
    ("out of order (ahead)", lambda ld, f: _raw(ld, f.next_offset + 1), OutOfOrderChunk),
    ("out of order (behind)", lambda ld, f: _raw(ld, f.next_offset - 1), OutOfOrderChunk),
    ("bad data CRC", lambda ld, f: _corrupt(_raw(ld, f.next_offset), 52), InvalidChunk),
    ("bad magic", lambda ld, f: _corrupt(_raw(ld, f.next_offset), 0), InvalidChunk),
    ("bad type", lambda ld, f: b"\x50\x07" + _raw(ld, f.next_offset)[2:], InvalidChunk),
    ("cut", lambda ld, f: _raw(ld, f.next_offset)[:-1], InvalidChunk),
    ("header only", lambda ld, f: _raw(ld, f.next_offset)[:30], InvalidChunk),
    ("good then bad CRC", lambda ld, f: _raw(ld, f.next_offset)
     + _corrupt(_raw(ld, ld.read_raw(f.next_offset)[0][0].next_offset), 52), InvalidChunk),
    ("good then out of order", lambda ld, f: _raw(ld, f.next_offset) + _raw(ld, f.next_offset),
     OutOfOrderChunk),
    ("lower epoch", lambda ld, f: encode_chunk(simple_entry(b"z"), chunk_id=f.next_offset,
                                              num_entries=1, num_records=1, timestamp=1,
                                              epoch=1)[1], StaleEpoch),
])
def test_refused_chunks_write_nothing(tmp_path: Path, name: str, make: Any,
                                      error: type[Exception]) -> None:
    leader, f = _leader_and_follower(tmp_path)
    try:
        leader.open_epoch(2)
        copy(leader, f)  # the follower's last chunk is of epoch 2
        write(leader, 3, "c")
        before_files, before = files(f), state(f)
        raw = make(leader, f)
        with pytest.raises(error):
            f.accept_chunks(raw)
        if " then " not in name:
            with pytest.raises(error):
                f.accept_chunk(raw)
        assert files(f) == before_files and state(f) == before
        copy(leader, f)  # and the follower goes on as if nothing had been offered
        assert files(f) == files(leader)
    finally:
        leader.close()
        f.close()


def test_accept_chunk_takes_exactly_one_chunk(tmp_path: Path) -> None:
    leader, f = _leader_and_follower(tmp_path)
    with leader, f:
        n = f.next_offset
        two = _raw(leader, n) + _raw(leader, leader.read_raw(n)[0][0].next_offset)
        with pytest.raises(InvalidChunk):
            f.accept_chunk(two)
        ref = f.accept_chunk(_raw(leader, f.next_offset))
        assert ref == leader.read_raw(ref.chunk_id)[0][0]


def test_open_epoch_refuses_a_lower_epoch_and_follows_accepted_ones(tmp_path: Path) -> None:
    leader, f = _leader_and_follower(tmp_path)
    with leader, f:
        leader.open_epoch(5)
        copy(leader, f)
        assert f.epoch == 5
        with pytest.raises(StaleEpoch):
            f.open_epoch(4)
        f.open_epoch(5)  # the same epoch again: one more opening chunk
        assert f.tail()[0] == 5


@pytest.mark.parametrize("vector_of", ["shorter_same_epoch", "lower_epoch"])
def test_a_log_ahead_of_the_leader_is_refused_and_kept(tmp_path: Path, vector_of: str) -> None:
    leader, f = _leader_and_follower(tmp_path)
    with leader, f:
        copy(leader, f)
        if vector_of == "shorter_same_epoch":
            write(f, 2, "extra")  # more of epoch 1 than the leader has
        else:
            f.open_epoch(2)
        before_files, before = files(f), state(f)
        with pytest.raises(LogAhead):
            f.truncate_to(leader.epoch_vector(), leader.first_offset)
        assert files(f) == before_files and state(f) == before


def test_truncate_to_cases(tmp_path: Path) -> None:
    """Each case of init_acceptor against a reference: the follower's log must end as the
    leader's prefix it shares, and recovery must agree."""
    base = tmp_path / "base"
    with StreamLog(base / "l", CFG) as leader, StreamLog(base / "f", CFG) as f:
        write(leader, 12, "e1")
        copy(leader, f)
        shared = leader.next_offset
        # catch up: same epoch, the follower is behind
        write(leader, 5, "e1b")
        assert f.truncate_to(leader.epoch_vector(), 0) == shared
        assert f.next_offset == shared
        # cut in the middle of a segment: the follower's own epoch-2 chunks go
        f.open_epoch(2)
        write(f, 3, "f2")
        leader.open_epoch(3)
        write(leader, 2, "e3")
        # the leader holds more of epoch 1 than the follower (an uncommitted tail of epoch 1
        # elected over the follower's epoch 2): the follower keeps all its epoch-1 chunks
        # (Osiris would empty the log and fetch it all again)
        assert f.truncate_to(leader.epoch_vector(), 0) == shared
        assert f.tail() == (1, shared - 1, shared) and f.epoch == 2
        copy(leader, f)
        assert files(f) == files(leader) and state(f) == state(leader)
        # the exact match (E, ChId) with chunks after it: cut right after it
        f.open_epoch(4)
        write(f, 4, "f4")
        leader.open_epoch(5)
        write(leader, 2, "e5")
        top3 = dict(leader.epoch_vector())[3]
        assert f.truncate_to(leader.epoch_vector(), 0) == top3 + 1
        assert f.tail()[:2] == (3, top3)
        copy(leader, f)
        assert files(f) == files(leader) and state(f) == state(leader)
        # already identical: nothing changes
        snap = files(f)
        assert f.truncate_to(leader.epoch_vector(), 0) == f.next_offset
        assert files(f) == snap
        expected = state(f)
    with StreamLog(base / "f", CFG) as f:
        assert state(f) == expected


def test_tracking_after_truncation_is_that_of_the_kept_prefix(tmp_path: Path) -> None:
    with StreamLog(tmp_path / "l", CFG) as leader, StreamLog(tmp_path / "f", CFG) as f:
        leader.append(simple_entry(b"a"), 1, 1, writer_sequences={"p": 1})
        leader.store_offset("c", 0)
        copy(leader, f)
        kept = (dict(f.writer_sequences), dict(f.offsets))
        f.open_epoch(2)
        f.append(simple_entry(b"b"), 1, 1, writer_sequences={"p": 2, "q": 9})
        f.store_offset("c", 1)
        f.store_offset("d", 1)
        for _ in range(10):  # rolls with snapshots of the diverged state
            f.append(simple_entry(b"x" * 100), 1, 1, writer_sequences={"q": 10})
        leader.open_epoch(3)
        f.truncate_to(leader.epoch_vector(), 0)
        assert (f.writer_sequences, f.offsets) == kept
        assert f.segment_count == 1
        copy(leader, f)
        assert state(f) == state(leader)


@pytest.mark.parametrize("seed", range(6))
def test_randomized_replication(tmp_path: Path, seed: int) -> None:
    """Appends, offsets, rolls, leader changes (new epochs), partial copies and truncations
    on three members; at each sync point every member's files and state are the leader's."""
    rng = random.Random(seed)
    cfg = LogConfig(max_segment_bytes=rng.choice([300, 600, 5000]),
                    max_segment_chunks=rng.choice([3, 1000]), max_writer_sequences=4)
    dirs = [tmp_path / f"m{i}" for i in range(3)]
    logs = [StreamLog(d, cfg) for d in dirs]
    leader = 0
    joined = {0}  # followers that truncated against the current leader's epoch
    try:
        for step in range(250):
            op = rng.random()
            lead = logs[leader]
            if op < 0.45:
                n = rng.randint(1, 3)
                data = b"".join(simple_entry(rng.randbytes(rng.randint(1, 60))) for _ in range(n))
                seqs = {f"w{rng.randint(0, 6)}": step} if rng.random() < 0.7 else None
                lead.append(data, n, n, writer_sequences=seqs)
            elif op < 0.55:
                lead.store_offset(f"c{rng.randint(0, 4)}", rng.randint(0, lead.next_offset))
            elif op < 0.75:
                i = rng.choice([i for i in range(3) if i != leader])
                if i not in joined:
                    logs[i].truncate_to(lead.epoch_vector(), lead.first_offset)
                    joined.add(i)
                copy(lead, logs[i], max_bytes=rng.choice([1, 200, 1 << 20]),
                     rounds=rng.randint(1, 4), one_by_one=rng.random() < 0.3)
            elif op < 0.82:  # leader change: any member, the next epoch
                epoch = max(log.epoch for log in logs) + 1
                leader = rng.randrange(3)
                logs[leader].open_epoch(epoch)
                joined = {leader}
            elif op < 0.88:  # a member restarts
                i = rng.randrange(3)
                before = state(logs[i])
                logs[i].close()
                logs[i] = StreamLog(dirs[i], cfg)
                assert state(logs[i]) == before
            else:  # sync point: everyone joins and catches up
                lead = logs[leader]
                for i in range(3):
                    if i != leader:
                        join(lead, logs[i], max_bytes=rng.choice([1, 500, 1 << 20]))
                joined = {0, 1, 2}
                want_files, want = files(lead), state(lead)
                for log in logs:
                    assert files(log) == want_files, f"step {step}"
                    assert state(log) == want, f"step {step}"
    finally:
        for log in logs:
            log.close()


def test_user_chunk_fields_survive_the_copy(tmp_path: Path) -> None:
    """Bloom, trailer and timestamp come across as the leader wrote them."""
    with StreamLog(tmp_path / "l", CFG) as leader, StreamLog(tmp_path / "f", CFG) as f:
        ref = leader.append(simple_entry(b"body"), 1, 1, writer_sequences={"p": 7},
                            timestamp=1234, bloom=bytes(range(16)))
        copy(leader, f)
        got = f.read_raw(0)[0][0]
        assert got == ref and got.chunk_type == CHUNK_USER
        assert f.read_bloom(got) == bytes(range(16)) and f.writer_sequences == {"p": 7}
        assert f.find_timestamp(1234) == ref and f.last_chunk() == ref


@pytest.mark.parametrize("which", ["active", "old"])
def test_an_index_epoch_that_disagrees_with_the_header_is_rebuilt(tmp_path: Path,
                                                                   which: str) -> None:
    d = tmp_path / "s"
    with StreamLog(d, CFG) as log:
        write(log, 6, "a")
        log.open_epoch(2)
        write(log, 6, "b")
        log.open_epoch(3)
        write(log, 2, "c")
        want_files, want = files(log), state(log)
        assert log.segment_count >= 3
    segs = sorted(p for p in d.iterdir() if p.suffix == ".index")
    index = segs[-1] if which == "active" else segs[-2]
    raw = bytearray(index.read_bytes())
    last = len(raw) - 29  # the last record: its epoch (u64 at byte 16 of the record)
    raw[last + 16 : last + 24] = (7).to_bytes(8, "big")
    index.write_bytes(bytes(raw))
    with StreamLog(d, CFG) as log:
        assert state(log) == want
        assert files(log) == want_files  # the index was rewritten from the headers
