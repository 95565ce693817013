"""Offset specifications and offset ranges: pure functions, no I/O.

A bound is what the user wrote (``first``, ``last``, an offset, a timestamp) for one partition
stream; a range is ``[start, end)`` in offsets of one stream once the broker resolved bounds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

KINDS = ("first", "last", "offset", "timestamp")


@dataclass(frozen=True)
class Bound:
    """``first`` (oldest kept), ``last`` (the end: after the newest record), ``offset`` N,
    or ``timestamp`` (ms since the epoch: the first chunk written at or after it)."""

    kind: str
    value: int = 0


@dataclass(frozen=True)
class Range:
    stream: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def count(self) -> int:
        return max(self.end - self.start, 0)


def parse_bound(spec: Any) -> Bound:
    """``first``/``earliest``, ``last``/``latest``, an int offset, ``{"offset": n}``,
    ``{"timestamp": ms}``, ``timestamp:ms`` or ``timestamp:<ISO 8601>``."""
    if isinstance(spec, bool):
        raise ValueError("an offset cannot be a bool")
    if isinstance(spec, int):
        if spec < 0:
            raise ValueError(f"an offset must be >= 0, not {spec}")
        return Bound("offset", spec)
    if isinstance(spec, dict):
        if set(spec) == {"offset"}:
            return parse_bound(int(spec["offset"]))
        if set(spec) == {"timestamp"}:
            return Bound("timestamp", int(spec["timestamp"]))
        raise ValueError(f"an offset object has one key, offset or timestamp: {spec!r}")
    if not isinstance(spec, str):
        raise ValueError(f"cannot read an offset from {spec!r}")
    s = spec.strip()
    low = s.lower()
    if low in ("first", "earliest"):
        return Bound("first")
    if low in ("last", "latest"):
        return Bound("last")
    if low.startswith("timestamp:"):
        return Bound("timestamp", parse_timestamp(s.split(":", 1)[1]))
    if s.lstrip("-").isdigit():
        return parse_bound(int(s))
    raise ValueError(f"unknown offset {spec!r}: first, last, an offset, timestamp:MS or JSON")


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, from digits or an ISO 8601 time (UTC unless it says)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        from datetime import UTC
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def parse_bounds(spec: str | None, streams: list[str], default: str) -> dict[str, Bound]:
    """One bound per partition stream: a single spec for all, or a JSON object by stream name
    (streams it does not name get ``default``)."""
    text = (spec or default).strip()
    if text.startswith("{"):
        doc = json.loads(text)
        unknown = set(doc) - set(streams)
        if unknown:
            raise ValueError(f"offsets name unknown streams: {sorted(unknown)}")
        return {s: parse_bound(doc.get(s, default)) for s in streams}
    bound = parse_bound(text)
    return {s: bound for s in streams}


def split_points(start: int, end: int, pieces: int) -> list[int]:
    """Even offsets strictly inside ``(start, end)`` cutting it into ``pieces`` parts."""
    if pieces <= 1 or end - start <= 1:
        return []
    step = (end - start) / pieces
    return sorted({start + int(step * i) for i in range(1, pieces)} - {start, end})


def cut(rng: Range, boundaries: list[int]) -> list[Range]:
    """``rng`` cut at the ``boundaries`` inside it (chunk starts): contiguous, non-empty,
    covering exactly ``[start, end)``."""
    points = sorted({b for b in boundaries if rng.start < b < rng.end})
    edges = [rng.start, *points, rng.end]
    return [Range(rng.stream, rng.partition, a, b) for a, b in zip(edges, edges[1:], strict=False)
            if b > a]


def limit_ranges(starts: dict[str, int], ends: dict[str, int], max_rows: int | None
                 ) -> dict[str, int]:
    """New end offsets reading at most ``max_rows`` in all, shared out evenly among the
    streams with data (a stream's unused share goes to the others)."""
    if max_rows is None:
        return dict(ends)
    avail = {s: max(ends[s] - starts.get(s, ends[s]), 0) for s in ends}
    take = dict.fromkeys(ends, 0)
    budget = max_rows
    while budget > 0:
        open_ = [s for s in sorted(avail) if avail[s] > take[s]]
        if not open_:
            break
        share = max(budget // len(open_), 1)
        for s in open_:
            n = min(share, avail[s] - take[s], budget)
            take[s] += n
            budget -= n
            if budget == 0:
                break
    return {s: starts.get(s, ends[s]) + take[s] if s in starts else ends[s] for s in ends}
