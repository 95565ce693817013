"""The arithmetic of `streamlet perf`, pure: latency histograms, percentiles and rates.

Latencies are kept in microseconds in a log-linear histogram (exact below 128 us, then 64
buckets per power of two, so a bucket is within 1/64 = 1.6% of its values): workers send
sparse histograms, never one value per message, and the command merges them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

#: sub-buckets per power of two, as a bit count (64: relative error under 1.6%)
SUB_BITS = 6
_EXACT = 2 << SUB_BITS  # values below this have a bucket each

#: the summary's percentiles (q in 0..1)
SUMMARY_QUANTILES = (0.5, 0.75, 0.95, 0.99)

Histogram = dict[int, int]  # bucket index -> count


def bucket(value: int) -> int:
    """The bucket of a non-negative value; negative values (clock steps) count as 0."""
    if value < _EXACT:
        return max(value, 0)
    shift = value.bit_length() - (SUB_BITS + 1)
    return (shift << SUB_BITS) + (value >> shift)


def bucket_bounds(index: int) -> tuple[int, int]:
    """The lowest and highest value of a bucket."""
    if index < _EXACT:
        return index, index
    shift = (index >> SUB_BITS) - 1
    low = (index - (shift << SUB_BITS)) << shift
    return low, low + (1 << shift) - 1


def bucket_value(index: int) -> int:
    """The value a bucket stands for: the middle of its range."""
    low, high = bucket_bounds(index)
    return (low + high) // 2


def record(hist: Histogram, value: int, count: int = 1) -> None:
    b = bucket(value)
    hist[b] = hist.get(b, 0) + count


def merge(into: Histogram, other: Mapping[int, int]) -> None:
    for b, n in other.items():
        into[b] = into.get(b, 0) + n


def total(hist: Mapping[int, int]) -> int:
    return sum(hist.values())


def percentile(hist: Mapping[int, int], q: float) -> int | None:
    """The nearest-rank q-quantile (0 < q <= 1) of the histogram's values, as its bucket's
    value; None when the histogram is empty."""
    n = total(hist)
    if n == 0:
        return None
    rank = max(1, math.ceil(q * n))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return bucket_value(b)
    return bucket_value(max(hist))  # pragma: no cover - rank <= n always stops above


def percentiles(hist: Mapping[int, int], qs: Iterable[float] = SUMMARY_QUANTILES,
                maximum: int | None = None) -> dict[str, float | None]:
    """``{"p50": ms, ...}`` in milliseconds, and ``"max"`` (the exact maximum when given, else
    the highest bucket's value); None for each when there is nothing. No percentile is above
    the maximum (a bucket's middle can be, when the maximum is in that bucket)."""
    out: dict[str, float | None] = {}
    if maximum is None and hist:
        maximum = bucket_value(max(hist))
    for q in qs:
        v = percentile(hist, q)
        if v is not None and maximum is not None:
            v = min(v, maximum)
        out[quantile_name(q)] = None if v is None else v / 1000
    out["max"] = None if maximum is None or not hist else maximum / 1000
    return out


def quantile_name(q: float) -> str:
    """0.5 -> p50, 0.999 -> p99.9"""
    return "p" + f"{q * 100:.3f}".rstrip("0").rstrip(".")


def rate(count: int, seconds: float) -> float:
    """Messages a second; 0 when no time passed."""
    return count / seconds if seconds > 0 else 0.0


def weights(records: int, samples: int) -> list[int]:
    """How many records each of ``samples`` evenly spread samples of a chunk stands for: the
    counts add up to ``records`` and differ by at most one."""
    if samples <= 0:
        return []
    base, extra = divmod(records, samples)
    return [base + (1 if i < extra else 0) for i in range(samples)]


def sample_indices(records: int, samples: int) -> list[int]:
    """Up to ``samples`` record indices spread evenly over a chunk of ``records`` (every record
    when there are no more than that), always including the first and the last."""
    if records <= samples:
        return list(range(records))
    if samples == 1:
        return [records - 1]
    return [i * (records - 1) // (samples - 1) for i in range(samples)]
