"""Random operations against a plain model of the log, with reopens, retention and torn tails."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streamlet.storage import ChunkRef, LogConfig, StreamLog
from streamlet.storage.chunk import iter_records, simple_entry


@dataclass
class Model:
    chunks: list[tuple[int, list[bytes], int]] = field(default_factory=list)  # id, bodies, ts
    sequences: dict[str, int] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)


def read_all(log: StreamLog) -> list[tuple[int, list[bytes]]]:
    out: list[tuple[int, list[bytes]]] = []
    ref = log.find_chunk(0)
    while ref is not None:
        got = log.read_chunks(ref, random.choice([1, 500, 1 << 20]))
        for r, view in got:
            out.append((r.chunk_id, [bytes(b) for b in iter_records(view[48:])]))
        ref = log.next_chunk(got[-1][0])
    return out


def check(log: StreamLog, model: Model) -> None:
    stored = read_all(log)
    first = log.first_offset
    expected = [(cid, bodies) for cid, bodies, _ in model.chunks if cid >= first]
    assert stored == expected
    assert log.writer_sequences == model.sequences
    for ref_name, off in log.offsets.items():  # offsets below the log may have been dropped
        assert model.offsets[ref_name] == off
    for ref_name, off in model.offsets.items():
        if off >= first:
            assert log.offsets.get(ref_name) == off
    if expected:
        last = log.last_chunk()
        assert last is not None and last.chunk_id == expected[-1][0]
        assert log.first_chunk_id == expected[0][0]
        probe = random.choice(expected)[0]
        found = log.find_chunk(probe)
        assert isinstance(found, ChunkRef) and found.chunk_id == probe
    else:
        assert log.last_chunk_id == -1


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_operations(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    random.seed(seed)
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_bytes=rng.choice([300, 2000, 10_000]),
                    max_segment_chunks=rng.choice([3, 7, 1000]),
                    max_bytes=rng.choice([None, 5000, 20_000]))
    log = StreamLog(d, cfg)
    model = Model()
    ts = 1_000_000
    for step in range(400):
        op = rng.random()
        if op < 0.6:
            bodies = [rng.randbytes(rng.randint(0, 60)) for _ in range(rng.randint(1, 6))]
            writers = {f"w{rng.randint(0, 4)}": step for _ in range(rng.randint(0, 2))}
            ts += rng.randint(0, 5)
            bloom = rng.choice([b"", rng.randbytes(16)])
            ref = log.append(b"".join(simple_entry(b) for b in bodies), len(bodies), len(bodies),
                             writer_sequences=writers or None, timestamp=ts, bloom=bloom)
            assert ref.chunk_id >= (model.chunks[-1][0] + 1 if model.chunks else 0)
            model.chunks.append((ref.chunk_id, bodies, ts))
            model.sequences.update(writers)
        elif op < 0.8:
            name, off = f"c{rng.randint(0, 3)}", rng.randint(0, log.next_offset)
            log.store_offset(name, off)
            model.offsets[name] = off
        elif op < 0.9:
            log.close()
            log = StreamLog(d, cfg)
        else:
            log.apply_retention()
        for name in [n for n, o in model.offsets.items() if n not in log.offsets]:
            del model.offsets[name]  # a snapshot dropped it (below the first offset)
        if step % 50 == 0:
            check(log, model)
    check(log, model)
    log.close()
    log = StreamLog(d, cfg)
    check(log, model)
    log.close()


@pytest.mark.parametrize("seed", range(6))
def test_random_torn_tail(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    random.seed(seed)
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=rng.choice([4, 1000]))
    model = Model()
    with StreamLog(d, cfg) as log:
        for i in range(rng.randint(1, 30)):
            bodies = [rng.randbytes(rng.randint(1, 40)) for _ in range(rng.randint(1, 4))]
            ref = log.append(b"".join(simple_entry(b) for b in bodies), len(bodies), len(bodies),
                             writer_sequences={"w": i}, timestamp=1000 + i)
            model.chunks.append((ref.chunk_id, bodies, 1000 + i))
        last_seg = d / f"{log.last_chunk().segment:020d}.segment"  # type: ignore[union-attr]
    size = last_seg.stat().st_size
    cut = rng.randint(8, size)
    with open(last_seg, "r+b") as f:
        f.truncate(cut)
    with StreamLog(d, cfg) as log:
        stored = read_all(log)
        assert stored == [(c, b) for c, b, _ in model.chunks[: len(stored)]]
        lost = len(model.chunks) - len(stored)
        assert lost <= 1 or cut < size  # at most the torn chunk(s) of the last segment
        if cut == size:
            assert lost == 0
        if stored:
            assert log.writer_sequences == {"w": len(stored) - 1}
            assert log.next_offset >= stored[-1][0] + len(stored[-1][1])
        log.append(simple_entry(b"after"), 1, 1)
    with StreamLog(d, cfg) as log:
        assert read_all(log)[-1][1] == [b"after"]
