"""What `streamlet perf` prints: the live line (stderr, once a second) and the summary (stdout,
as text or JSON). Pure: figures in, text out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import stats


@dataclass
class Totals:
    """The run's counts and when each last grew (seconds since the producers were released)."""

    published: int = 0
    confirmed: int = 0
    errored: int = 0
    consumed: int = 0
    published_s: float = 0.0
    confirmed_s: float = 0.0
    consumed_s: float = 0.0
    elapsed_s: float = 0.0
    interrupted: bool = False
    confirm_hist: stats.Histogram = field(default_factory=dict)
    consume_hist: stats.Histogram = field(default_factory=dict)
    confirm_max_us: int | None = None
    consume_max_us: int | None = None


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}" if v < 10 else f"{v:.1f}"


def live_line(second: int, published: float, confirmed: float, consumed: float,
              confirm_hist: stats.Histogram, consume_hist: stats.Histogram) -> str:
    """``3s published 512,300 msg/s, confirmed ..., consumed ...; latency p50/p99 ms: confirm
    0.812/2.100, consume 1.200/4.800`` (rates and latencies over the last second)."""
    def pair(h: stats.Histogram) -> str:
        p = stats.percentiles(h, (0.5, 0.99))
        return f"{_ms(p['p50'])}/{_ms(p['p99'])}"
    return (f"{second}s published {published:,.0f} msg/s, confirmed {confirmed:,.0f} msg/s, "
            f"consumed {consumed:,.0f} msg/s; latency p50/p99 ms: confirm "
            f"{pair(confirm_hist)}, consume {pair(consume_hist)}")


def summary(t: Totals, settings: dict[str, Any]) -> dict[str, Any]:
    """The machine-readable summary (`--json`): counts, rates (count over the time until the
    count last grew), latency percentiles in milliseconds."""
    return {
        "settings": settings,
        "interrupted": t.interrupted,
        "elapsed_s": round(t.elapsed_s, 3),
        "published": t.published,
        "confirmed": t.confirmed,
        "errored": t.errored,
        "consumed": t.consumed,
        "rates": {
            "published_per_s": round(stats.rate(t.published, t.published_s), 1),
            "confirmed_per_s": round(stats.rate(t.confirmed, t.confirmed_s), 1),
            "consumed_per_s": round(stats.rate(t.consumed, t.consumed_s), 1),
        },
        "latency_ms": {
            "confirm": stats.percentiles(t.confirm_hist, maximum=t.confirm_max_us),
            "consume": stats.percentiles(t.consume_hist, maximum=t.consume_max_us),
        },
        "latency_samples": {"confirm": stats.total(t.confirm_hist),
                            "consume": stats.total(t.consume_hist)},
    }


def summary_text(doc: dict[str, Any]) -> str:
    rates, lat = doc["rates"], doc["latency_ms"]
    s = doc["settings"]
    head = (f"streamlet perf against {s['server']}: {s['producers']} producer(s), "
            f"{s['consumers']} consumer(s), {len(s['streams'])} stream(s), {s['size']} B "
            f"messages, {doc['elapsed_s']:.1f} s{' (interrupted)' if doc['interrupted'] else ''}")
    lines = [
        head,
        f"published {doc['published']:,} ({rates['published_per_s']:,.0f} msg/s)",
        f"confirmed {doc['confirmed']:,} ({rates['confirmed_per_s']:,.0f} msg/s)"
        + (f", {doc['errored']:,} refused" if doc["errored"] else ""),
        f"consumed {doc['consumed']:,} ({rates['consumed_per_s']:,.0f} msg/s)",
    ]
    for kind in ("confirm", "consume"):
        p = lat[kind]
        lines.append(f"{kind} latency ms: " + ", ".join(f"{k} {_ms(v)}" for k, v in p.items()))
    return "\n".join(lines)


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2)
