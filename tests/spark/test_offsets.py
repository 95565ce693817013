"""The pure parts: offset specifications, range cutting, read limits, options."""

from __future__ import annotations

import pytest

from streamlet_spark.offsets import (
    Bound,
    Range,
    cut,
    limit_ranges,
    parse_bound,
    parse_bounds,
    split_points,
)
from streamlet_spark.options import parse_options


def test_parse_bound() -> None:
    assert parse_bound("first") == parse_bound("earliest") == Bound("first")
    assert parse_bound("LAST") == Bound("last")
    assert parse_bound("42") == parse_bound(42) == parse_bound({"offset": 42}) == Bound("offset", 42)
    assert parse_bound("timestamp:1700000000000") == Bound("timestamp", 1700000000000)
    assert parse_bound("timestamp:2023-11-14T22:13:20Z") == Bound("timestamp", 1700000000000)
    assert parse_bound({"timestamp": 5}) == Bound("timestamp", 5)
    for bad in ("-1", "nope", True, {"x": 1}, 1.5):
        with pytest.raises(ValueError):
            parse_bound(bad)


def test_parse_bounds_per_partition() -> None:
    streams = ["s-0", "s-1", "s-2"]
    got = parse_bounds('{"s-0": 10, "s-2": "last"}', streams, "first")
    assert got == {"s-0": Bound("offset", 10), "s-1": Bound("first"), "s-2": Bound("last")}
    assert parse_bounds(None, streams, "last") == dict.fromkeys(streams, Bound("last"))
    with pytest.raises(ValueError):
        parse_bounds('{"other": 1}', streams, "first")


def test_cut_covers_the_range_exactly() -> None:
    rng = Range("s", 0, 10, 100)
    parts = cut(rng, [5, 10, 40, 40, 70, 100, 120])
    assert [(p.start, p.end) for p in parts] == [(10, 40), (40, 70), (70, 100)]
    assert cut(rng, []) == [rng]
    assert split_points(0, 100, 4) == [25, 50, 75]
    assert split_points(0, 1, 4) == [] and split_points(0, 100, 1) == []


def test_limit_ranges_shares_the_budget() -> None:
    starts, ends = {"a": 0, "b": 10, "c": 5}, {"a": 100, "b": 12, "c": 5}
    assert limit_ranges(starts, ends, None) == ends
    got = limit_ranges(starts, ends, 50)
    assert got == {"a": 48, "b": 12, "c": 5}  # b's unused share goes to a
    assert sum(got[s] - starts[s] for s in got) == 50
    assert limit_ranges(starts, ends, 1000) == ends


def test_options() -> None:
    opts = parse_options({"stream": "x", "PORT": "1234", "minPartitions": "3",
                          "maxRecordsPerTrigger": "10", "format": "AMQP"})
    assert (opts.port, opts.min_partitions, opts.max_records_per_trigger, opts.format) == (
        1234, 3, 10, "amqp")
    for bad in ({}, {"stream": "x", "superStream": "y"}, {"stream": "x", "port": "p"},
                {"stream": "x", "format": "json"}, {"stream": "x", "minPartitions": "0"}):
        with pytest.raises(ValueError):
            parse_options(bad)
