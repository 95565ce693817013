"""The arithmetic of `streamlet perf` (streamlet.perf.stats, plan, producer, consumer), by
tables: no broker, no clock."""

from __future__ import annotations

import struct

import pytest

from streamlet.perf import plan, stats
from streamlet.perf.consumer import chunk_latencies
from streamlet.perf.producer import contiguous_runs


@pytest.mark.parametrize(("value", "index", "bounds"), [
    (-5, 0, (0, 0)),  # a clock step back counts as 0
    (0, 0, (0, 0)),
    (127, 127, (127, 127)),  # exact below 128
    (128, 128, (128, 129)),  # then 64 buckets a power of two: width 2 from 128
    (129, 128, (128, 129)),
    (255, 191, (254, 255)),
    (256, 192, (256, 259)),
    (1000, 317, (1000, 1007)),
    (1_000_000, 954, (999_424, 1_007_615)),
])
def test_buckets(value: int, index: int, bounds: tuple[int, int]) -> None:
    assert stats.bucket(value) == index
    assert stats.bucket_bounds(index) == bounds


def test_every_value_falls_within_its_bucket_and_buckets_are_monotonic() -> None:
    last = -1
    for v in [*range(0, 5000), *range(5000, 10**7, 997)]:
        b = stats.bucket(v)
        low, high = stats.bucket_bounds(b)
        assert low <= v <= high
        assert (high - low) <= max(low, 1) / 64  # within 1/64 of its values
        assert b >= last
        last = b


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([], 0.5, None),
    ([10], 0.5, 10),
    ([10], 0.99, 10),
    ([1, 2, 3, 4], 0.5, 2),  # nearest rank: ceil(0.5 * 4) = 2nd
    ([1, 2, 3, 4], 0.75, 3),
    ([1, 2, 3, 4], 1.0, 4),
    (list(range(1, 101)), 0.99, 99),
    (list(range(1, 101)), 0.95, 95),
    ([5] * 99 + [100_000], 0.99, 5),  # one outlier in 100 is above p99
    ([5] * 98 + [100_000] * 2, 0.99, stats.bucket_value(stats.bucket(100_000))),
])
def test_percentile(values: list[int], q: float, expected: int | None) -> None:
    h: stats.Histogram = {}
    for v in values:
        stats.record(h, v)
    assert stats.percentile(h, q) == expected


def test_counts_weigh_like_repeated_values_and_merge_adds() -> None:
    a: stats.Histogram = {}
    stats.record(a, 10, 3)
    b: stats.Histogram = {}
    for _ in range(3):
        stats.record(b, 10)
    assert a == b
    stats.merge(a, {stats.bucket(50): 7})
    assert stats.total(a) == 10
    assert stats.percentile(a, 0.3) == 10 and stats.percentile(a, 0.31) == 50


@pytest.mark.parametrize(("values", "maximum", "expected"), [
    ([], None, {"p50": None, "p75": None, "p95": None, "p99": None, "max": None}),
    ([1000, 2000, 3000, 4000], 4000,
     {"p50": 2.0, "p75": 3.0, "p95": 4.0, "p99": 4.0, "max": 4.0}),
    # the top bucket's middle (774,143 us) is above the exact maximum: capped at it
    ([773_180], 773_180, {"p50": 773.18, "p75": 773.18, "p95": 773.18, "p99": 773.18,
                          "max": 773.18}),
])
def test_percentiles_in_milliseconds(values: list[int], maximum: int | None,
                                     expected: dict[str, float | None]) -> None:
    h: stats.Histogram = {}
    for v in values:
        stats.record(h, v)
    got = stats.percentiles(h, maximum=maximum)
    # within a bucket's width (1/64) of the values; max exact
    assert got == (pytest.approx(expected, rel=1 / 64) if values else expected)
    assert got["max"] == expected["max"]
    assert all(v is None or v <= got["max"] for v in got.values())  # type: ignore[operator]


@pytest.mark.parametrize(("q", "name"), [(0.5, "p50"), (0.75, "p75"), (0.99, "p99"),
                                         (0.999, "p99.9"), (1.0, "p100")])
def test_quantile_names(q: float, name: str) -> None:
    assert stats.quantile_name(q) == name


@pytest.mark.parametrize(("count", "seconds", "expected"), [
    (0, 0.0, 0.0), (100, 0.0, 0.0), (100, -1.0, 0.0), (100, 2.0, 50.0), (3, 0.5, 6.0)])
def test_rate(count: int, seconds: float, expected: float) -> None:
    assert stats.rate(count, seconds) == expected


@pytest.mark.parametrize(("records", "samples", "indices", "weights"), [
    (0, 64, [], []),
    (3, 64, [0, 1, 2], [1, 1, 1]),
    (10, 4, [0, 3, 6, 9], [3, 3, 2, 2]),
    (100, 2, [0, 99], [50, 50]),
    (5, 1, [4], [5]),
])
def test_chunk_samples(records: int, samples: int, indices: list[int],
                       weights: list[int]) -> None:
    got = stats.sample_indices(records, samples)
    assert got == indices
    w = stats.weights(records, len(got))
    assert w == weights and sum(w) == records


@pytest.mark.parametrize(("ids", "runs"), [
    ((), []),
    ((5,), [(5, 5)]),
    ((1, 2, 3), [(1, 3)]),
    ((3, 1, 2, 7, 8, 10), [(1, 3), (7, 8), (10, 10)]),
    ((4, 4, 5), [(4, 5)]),  # a repeated id counts once in the ranges
])
def test_contiguous_runs(ids: tuple[int, ...], runs: list[tuple[int, int]]) -> None:
    assert contiguous_runs(ids) == runs


def _messages(times: list[int], size: int = 16) -> bytes:
    return b"".join(struct.pack(">IQ", size, t) + bytes(size - 8) for t in times)


@pytest.mark.parametrize(("data", "entries", "records", "ours", "latencies"), [
    # a uniform chunk of this run: every record, at its own latency
    (_messages([100, 200, 300]), 3, 3, 3, [(900, 1), (800, 1), (700, 1)]),
    # an earlier run's chunk: counted by the caller, not ours, no latency
    (_messages([10, 20]), 2, 2, 0, []),
    # straddling the start: walked, only the later ones
    (_messages([50, 150]), 2, 2, 1, [(850, 1)]),
    # another writer's message (other size) among ours: walked
    (struct.pack(">I", 3) + b"abc" + _messages([400]), 2, 2, 1, [(600, 1)]),
    # a sub-batch entry (type bit set) is skipped whole
    (struct.pack(">BHII", 0x80, 2, 5, 5) + b"zzzzz" + _messages([500]), 2, 3, 1, [(500, 1)]),
    # a send time from the future is not a perf message's
    (_messages([10**15]), 1, 1, 0, []),
])
def test_chunk_latencies(data: bytes, entries: int, records: int, ours: int,
                         latencies: list[tuple[int, int]]) -> None:
    assert chunk_latencies(data, entries, records, 16, since_ns=100, now_ns=1000) == (
        ours, latencies)


def test_a_big_uniform_chunk_is_sampled_with_weights_adding_up() -> None:
    data = _messages([100 + i for i in range(1000)])
    ours, lats = chunk_latencies(data, 1000, 1000, 16, since_ns=100, now_ns=2000, samples=64)
    assert ours == 1000
    assert len(lats) == 64 and sum(n for _, n in lats) == 1000
    assert lats[0][0] == 1900 and lats[-1][0] == 2000 - 1099


@pytest.mark.parametrize(("given", "count", "names"), [
    (None, 1, ["perf-stream"]),
    (None, 3, ["perf-stream-1", "perf-stream-2", "perf-stream-3"]),
    (["a", "b"], 1, ["a", "b"]),
])
def test_stream_names(given: list[str] | None, count: int, names: list[str]) -> None:
    assert plan.stream_names(given, count) == names


@pytest.mark.parametrize(("rate", "producers", "shares"), [
    (0, 2, [0.0, 0.0]), (1000, 4, [250.0] * 4), (100, 0, [])])
def test_rate_shares(rate: float, producers: int, shares: list[float]) -> None:
    assert plan.split_rate(rate, producers) == shares


@pytest.mark.parametrize(("producers", "consumers", "processes", "layout"), [
    (1, 1, 1, {"producers-1": [("producer", 0, "a")], "consumers-1": [("consumer", 0, "a")]}),
    (3, 0, 2, {"producers-1": [("producer", 0, "a"), ("producer", 2, "a")],
               "producers-2": [("producer", 1, "b")]}),
    (0, 2, 4, {"consumers-1": [("consumer", 0, "a")], "consumers-2": [("consumer", 1, "b")]}),
])
def test_assign(producers: int, consumers: int, processes: int,
                layout: dict[str, list[tuple[str, int, str]]]) -> None:
    streams = ["a", "b"] if producers + consumers > 2 or processes > 1 else ["a"]
    workers = plan.assign(streams, producers, consumers, processes, 0)
    assert {w.name: [(r.kind, r.index, r.stream) for r in w.roles] for w in workers} == layout
