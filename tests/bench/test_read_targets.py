"""The read targets the report checks: catch-up against RabbitMQ's (leader and follower), the
share of loopback at 1,000 B, records per chunk the same across repeats, and MEGA's and RSIO's
rows against the RabbitMQ protocol's on the same broker."""

from __future__ import annotations

import pytest

from bench.report import packing_lines, protocol_lines, replicated_targets, targets
from bench.run import median_rows
from bench.workloads import Row


def _row(key: str, server: str, msg_s: float, size: int = 100, chunks: int = 0) -> Row:
    n = 1000
    return Row(key, key, server, size, n, sent=n, confirmed=n, consumed=n,
               seconds=n / msg_s, chunks=chunks, measures="consumed")


def _by(rows: list[Row]) -> dict[tuple[str, str], Row]:
    return {(r.workload, r.server): r for r in rows}


@pytest.mark.parametrize(("streamlet", "rabbitmq", "verdict"), [
    (15.1, 10.0, "MET "), (14.9, 10.0, "MISS"), (30.0, 10.0, "MET "), (9.0, 10.0, "MISS"),
])
def test_catch_up_from_the_leader_and_a_follower_needs_one_and_a_half_times(
        streamlet: float, rabbitmq: float, verdict: str) -> None:
    rows = [_row("consume-100", "streamlet", streamlet), _row("consume-100", "rabbitmq", rabbitmq),
            _row("r3-consume-1000", "streamlet", streamlet, 1000),
            _row("r3-consume-1000", "rabbitmq", rabbitmq, 1000)]
    leader = [x for x in targets(rows, {}) if "consume-100 throughput" in x]
    follower = [x for x in replicated_targets(_by(rows)) if "from a follower" in x]
    assert len(leader) == len(follower) == 1
    assert leader[0].startswith(verdict) and ">= 1.5x" in leader[0]
    assert follower[0].startswith(verdict) and follower[0].startswith(f"{verdict} consume-1000")


@pytest.mark.parametrize(("mb_s", "loopback", "verdict"), [
    (2_000.0, 2_000.0, "MET "), (1_701.0, 2_000.0, "MET "), (1_699.0, 2_000.0, "MISS"),
])
def test_catch_up_at_1000_bytes_against_loopback(mb_s: float, loopback: float,
                                                 verdict: str) -> None:
    rows = [_row("consume-1000", "streamlet", mb_s * 1000, 1000)]  # 1,000 B a message
    got = [x for x in targets(rows, {"loopback TCP": loopback}) if "of loopback TCP (same" in x]
    assert len(got) == 1 and got[0].startswith(verdict)
    assert targets(rows, {}) == [x for x in targets(rows, {}) if "loopback" not in x]


@pytest.mark.parametrize(("chunks", "verdict"), [
    ((100, 120, 150), "MET "), ((100, 151, 120), "MISS"), ((500, 500, 500), "MET "),
])
def test_records_per_chunk_the_same_in_every_repeat(chunks: tuple[int, ...], verdict: str) -> None:
    runs = [[_row("consume-100", "streamlet", 1e7, chunks=c)] for c in chunks]
    theirs = [[_row("consume-100", "rabbitmq", 1e7, chunks=c)] for c in (10, 100, 50)]
    rows = median_rows(runs) + median_rows(theirs)
    lines = packing_lines(_by(rows))
    assert lines[0].startswith(f"{verdict} records per chunk at 100 B within 1.5x")
    assert lines[1].startswith("INFO RabbitMQ's records per chunk") and "10.00x" in lines[1]
    assert packing_lines(_by(median_rows(runs[:1]))) == []  # one run: nothing to compare


def test_mega_and_rsio_against_the_rabbitmq_protocol() -> None:
    rows = [_row("rabbitmq-produce-100", "streamlet", 1e6), _row("rabbitmq-consume-100",
                                                                  "streamlet", 1e7),
            _row("mega-produce-100", "streamlet", 5e5), _row("rsio-produce-100", "streamlet", 4e5),
            _row("mega-consume-100", "streamlet", 2.5e6), _row("rsio-consume-100", "streamlet",
                                                               4e6)]
    lines = protocol_lines(rows, _by(rows))
    verdicts = {x.split()[1]: x[:4] for x in lines if x[:4] in ("MET ", "MISS")}
    assert verdicts == {"mega-produce-100": "MET ", "rsio-produce-100": "MISS",
                        "rsio-consume-100": "MISS", "mega-consume-100": "MET "}
