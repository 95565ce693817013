"""The side-by-side table, the target checks and the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .protocols import baseline_of
from .workloads import Row

#: rows where lower is better compare this metric; every other row compares msg/s
_LOWER_IS_BETTER = {"latency": "p99_ms", "r3-latency": "p99_ms"}
#: rows whose key figure is neither msg/s nor a column: (extra key, label in the ratio column)
_EXTRA_METRIC = {"r3-failover": ("failover_ms", "failover time"),
                 "r3-add-member": ("add_s", "time to in sync")}
#: catch-up consume (from the leader and from a follower) against RabbitMQ's, at least
CATCH_UP = 1.5
#: ... and at 1,000 B, at least this share of the loopback reference measured in the same run
LOOPBACK = "loopback TCP"
LOOPBACK_SHARE = 0.85
#: records per chunk of the 100 B catch-up: the largest repeat over the smallest, at most
PACKING_SPREAD = 1.5
#: MEGA's and RSIO's rows against the RabbitMQ protocol's on the same broker, at least
PROTOCOL_GOALS = {"mega-produce-100": 0.5, "rsio-produce-100": 0.5, "rsio-consume-100": 0.5,
                  "mega-consume-100": 0.25}


def _num(v: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def ratio(stream: Row, rabbit: Row) -> tuple[str, float | None]:
    """streamlet / RabbitMQ of the row's key metric, and its label."""
    if stream.workload in _EXTRA_METRIC:
        key, label = _EXTRA_METRIC[stream.workload]
        x, y = stream.extra.get(key), rabbit.extra.get(key)
        return label, (x / y if x is not None and y else None)
    metric = _LOWER_IS_BETTER.get(stream.workload)
    if metric:
        a, b = getattr(stream, metric), getattr(rabbit, metric)
        return metric.replace("_ms", ""), (a / b if a is not None and b else None)
    return "msg/s", (stream.msg_s / rabbit.msg_s if rabbit.msg_s else None)


def table(rows: list[Row]) -> str:
    """A Markdown table, one line per workload and server, the ratio on streamlet's line."""
    by = {(r.workload, r.server): r for r in rows}
    head = ("| workload | server | msg/s | MB/s | records/chunk | p50 ms | p99 ms | RSS peak MB "
            "| CPU % broker / client | exact | streamlet / RabbitMQ |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        other = by.get((r.workload, "rabbitmq"))
        rat = ""
        if r.server == "streamlet" and other is not None:
            name, v = ratio(r, other)
            rat = f"{v:.2f}x {name}" if v is not None else "-"
        base = by.get((baseline_of(r) or "", "streamlet"))
        if base is not None:  # MEGA, RSIO: against the RabbitMQ protocol on the same broker
            rat = f"{r.msg_s / base.msg_s:.2g}x msg/s of the RabbitMQ protocol" if base.msg_s else "-"
        rss = f"{r.rss_peak_mb:,.0f}"
        if r.workload == "many-streams":
            rss += f" (after: {r.rss_end_mb:,.0f})"
        if r.workload == "stalled":
            rss += f" (+{r.extra.get('rss_growth_mb', 0):,.0f})"
        lines.append(
            f"| {r.label} | {r.server} | {r.msg_s:,.0f} | {r.mb_s:,.1f} "
            f"| {_num(r.records_per_chunk)} | {_num(r.p50_ms, '{:.2f}')} "
            f"| {_num(r.p99_ms, '{:.2f}')} | {rss} "
            f"| {_num(r.broker_cpu_pct)} / {_num(r.client_cpu_pct)} "
            f"| {'yes' if r.exact else 'NO'} | {rat} |")
    return "\n".join(lines)


def targets(rows: list[Row], physical: dict[str, float],
            notes: list[str] | None = None) -> list[str]:
    """One line per target (the single-node ones, the replicated workload's, SBP's): met,
    missed, or not measured, then the protocol comparisons; then ``notes``."""
    by = {(r.workload, r.server): r for r in rows}
    out: list[str] = []

    def pair(key: str) -> tuple[Row | None, Row | None]:
        return by.get((key, "streamlet")), by.get((key, "rabbitmq"))

    for key, goal in (("publish-100", 1.0), ("consume-100", CATCH_UP), ("publish-1000", 1.0),
                      ("consume-1000", CATCH_UP)):
        s, r = pair(key)
        if s and r:
            v = s.msg_s / r.msg_s if r.msg_s else 0.0
            out.append(f"{'MET ' if v >= goal else 'MISS'} {key} throughput >= {goal:.1f}x "
                       f"RabbitMQ: {v:.2f}x")
    out += packing_lines(by)
    s, r = pair("latency")
    if s and r and s.p99_ms is not None and r.p99_ms is not None:
        ok = s.p99_ms <= r.p99_ms
        out.append(f"{'MET ' if ok else 'MISS'} p99 latency <= RabbitMQ's: "
                   f"{s.p99_ms:.2f} ms vs {r.p99_ms:.2f} ms")
    s, _ = pair("many-streams")
    if s:
        out.append(f"{'MET ' if s.rss_end_mb < 200 else 'MISS'} RSS < 200 MB after "
                   f"{s.expected:,} messages over many streams: {s.rss_end_mb:.0f} MB")
    s, _ = pair("stalled")
    if s:
        g = s.extra.get("rss_growth_mb", 0.0)
        out.append(f"{'MET ' if g < 50 else 'MISS'} flat memory while a consumer stops reading: "
                   f"RSS grew {g:.0f} MB while {s.expected * s.size / 1e6:,.0f} MB were pushed")
    s, _ = pair("consume-1000")
    loopback = physical.get(LOOPBACK)
    if s and loopback:
        ok = s.mb_s >= LOOPBACK_SHARE * loopback
        out.append(f"{'MET ' if ok else 'MISS'} consume-1000 >= {LOOPBACK_SHARE:.0%} of "
                   f"{LOOPBACK} (same run): {s.mb_s:,.0f} vs {loopback:,.0f} MB/s "
                   f"({s.mb_s / loopback:.0%})")
    for key, verb in (("publish-1000", "publishing"), ("consume-1000", "consuming")):
        s, _ = pair(key)
        if s and physical:
            parts = [f"{s.mb_s:,.0f} MB/s {verb} 1,000 B messages"]
            for name, v in physical.items():
                if verb == "consuming" and "disk" in name:
                    continue  # a catch-up read comes from the page cache, not the disk
                parts.append(f"{100 * s.mb_s / v:.0f}% of {name} ({v:,.0f} MB/s)")
            out.append("INFO streamlet " + ", ".join(parts))
    out += replicated_targets(by)
    out += protocol_lines(rows, by)
    return out + list(notes or [])


def packing_lines(by: dict[tuple[str, str], Row]) -> list[str]:
    """Whether streamlet packed the same records per chunk in every repeat of the 100 B
    catch-up (the largest over the smallest within PACKING_SPREAD); RabbitMQ's spread beside it."""
    out = []
    for server in ("streamlet", "rabbitmq"):
        row = by.get(("consume-100", server))
        seen = [r.get("records_per_chunk") for r in row.extra.get("repeats", [])] if row else []
        got = [float(v) for v in seen if v]
        if len(got) < 2:
            continue
        spread = max(got) / min(got)
        each = ", ".join(f"{v:,.0f}" for v in got)
        if server == "streamlet":
            out.append(f"{'MET ' if spread <= PACKING_SPREAD else 'MISS'} records per chunk at "
                       f"100 B within {PACKING_SPREAD}x across repeats: {spread:.2f}x ({each})")
        else:
            out.append(f"INFO RabbitMQ's records per chunk at 100 B across repeats: "
                       f"{spread:.2f}x ({each})")
    return out


def protocol_lines(rows: list[Row], by: dict[tuple[str, str], Row]) -> list[str]:
    """MEGA's and RSIO's throughput against the RabbitMQ protocol's, all on streamlet, against
    their targets at 100 B (PROTOCOL_GOALS) and as a comparison at every size; SBP's against its
    target, >= the RabbitMQ protocol's at 100 B and 1,000 B (an SBP record batch is a message:
    msg/s and MB/s say the same)."""
    out = []
    for key, goal in PROTOCOL_GOALS.items():
        s, base = by.get((key, "streamlet")), by.get((f"rabbitmq-{key.partition('-')[2]}",
                                                       "streamlet"))
        if s and base and base.msg_s:
            v = s.msg_s / base.msg_s
            out.append(f"{'MET ' if v >= goal else 'MISS'} {key} >= {goal}x the RabbitMQ "
                       f"protocol's (same broker, same run): {v:.2f}x")
    for size in (100, 1000):
        pairs = [(by.get((f"sbp-{k}-{size}", "streamlet")),
                  by.get((f"rabbitmq-{k}-{size}", "streamlet"))) for k in ("produce", "consume")]
        if all(s and r and r.msg_s for s, r in pairs):
            got = [s.msg_s / r.msg_s for s, r in pairs]  # type: ignore[union-attr]
            out.append(f"{'MET ' if min(got) >= 1.0 else 'MISS'} SBP >= RabbitMQ protocol at "
                       f"{size:,} B (same broker, same run): produce {got[0]:.2f}x, "
                       f"consume {got[1]:.2f}x")
    for r in rows:
        base = by.get((baseline_of(r) or "", "streamlet"))
        if base is not None and base.msg_s:
            out.append(f"INFO streamlet {r.workload} / {base.workload} (same broker, same run): "
                       f"{r.msg_s / base.msg_s:.2g} ({r.msg_s:,.0f} vs {base.msg_s:,.0f} msg/s)")
    return out


def replicated_targets(by: dict[tuple[str, str], Row]) -> list[str]:
    """The replicated workload's targets for a stream with 3 members, and RF=3 / RF=1 for streamlet."""
    out: list[str] = []
    for size in (100, 1000):
        s, r = by.get((f"r3-publish-{size}", "streamlet")), by.get((f"r3-publish-{size}",
                                                                     "rabbitmq"))
        if s and r:
            v = s.msg_s / r.msg_s if r.msg_s else 0.0
            out.append(f"{'MET ' if v >= 1.5 else 'MISS'} publish-{size} with 3 replicas >= "
                       f"1.5x RabbitMQ's with 3 replicas: {v:.2f}x "
                       f"({s.msg_s:,.0f} vs {r.msg_s:,.0f} msg/s)")
    s, r = by.get(("r3-latency", "streamlet")), by.get(("r3-latency", "rabbitmq"))
    if s and r and s.p99_ms is not None and r.p99_ms is not None:
        out.append(f"{'MET ' if s.p99_ms <= r.p99_ms else 'MISS'} p99 latency with 3 replicas "
                   f"<= RabbitMQ's: {s.p99_ms:.2f} ms vs {r.p99_ms:.2f} ms")
    s, r = by.get(("r3-failover", "streamlet")), by.get(("r3-failover", "rabbitmq"))
    if s and r:
        a, b = s.extra.get("failover_ms"), r.extra.get("failover_ms")
        ok = a is not None and (b is None or a <= b)
        out.append(f"{'MET ' if ok else 'MISS'} failover (kill -9 of the leader to the first new "
                   f"confirm) no slower than RabbitMQ's: {_ms(a)} vs {_ms(b)}")
    for server in ("streamlet", "rabbitmq"):
        c = by.get(("r3-catchup", server))
        if c is None:
            continue
        took = c.extra.get("catchup_s")
        measured = took is not None and not c.errors
        gb = c.expected * c.size / 1e9
        if server == "streamlet":
            ok = measured and took is not None and took <= 10 * gb
            out.append(f"{'MET ' if ok else 'MISS'} a member's catch-up of {gb:.2f} GB within "
                       f"{10 * gb:.1f} s (10 s per GB): "
                       f"{f'{took:.2f} s' if measured else 'not measured'}")
        else:
            out.append(f"INFO RabbitMQ's member catch-up of {gb:.2f} GB: "
                       f"{f'{took:.2f} s' if measured else 'not measured'}")
    out += add_member_targets(by)
    for size in (100, 1000):
        s, r = by.get((f"r3-consume-{size}", "streamlet")), by.get((f"r3-consume-{size}",
                                                                     "rabbitmq"))
        if s and r and r.msg_s:
            v = s.msg_s / r.msg_s
            out.append(f"{'MET ' if v >= CATCH_UP else 'MISS'} consume-{size} from a follower "
                       f"with 3 replicas >= {CATCH_UP:.1f}x RabbitMQ's (read from a replica on "
                       f"both): {v:.2f}x")
    if by.get(("r3-failover", "rabbitmq")) is None and by.get(("r3-failover", "streamlet")):
        s = by[("r3-failover", "streamlet")]
        out.append(f"INFO streamlet failover with 3 replicas: {_ms(s.extra.get('failover_ms'))}")
    for key in ("publish-100", "consume-100", "publish-1000", "consume-1000"):
        rf3, rf1 = by.get((f"r3-{key}", "streamlet")), by.get((key, "streamlet"))
        if rf3 and rf1 and rf1.msg_s:
            out.append(f"INFO streamlet {key} RF=3 / RF=1: {rf3.msg_s / rf1.msg_s:.2f} "
                       f"({rf3.msg_s:,.0f} vs {rf1.msg_s:,.0f} msg/s)")
    return out


def add_member_targets(by: dict[tuple[str, str], Row]) -> list[str]:
    """A member added to a filled stream of 2 (add-member): in sync in no more time than
    RabbitMQ's add_replica takes; streamlet's figure alone as INFO when RabbitMQ's is missing."""
    s, r = by.get(("r3-add-member", "streamlet")), by.get(("r3-add-member", "rabbitmq"))
    if s is None:
        return []
    gb = s.expected * s.size / 1e9
    a = s.extra.get("add_s") if s.exact else None
    if r is None:
        return [f"INFO streamlet adds a member to a stream of {gb:.2f} GB in {_s(a)}"]
    b = r.extra.get("add_s") if r.exact else None
    ok = a is not None and (b is None or a <= b)
    rate = f" ({s.expected * s.size / 1e6 / a:,.0f} MB/s)" if a else ""
    vs = f", {a / b:.2f}x" if a is not None and b else ""
    return [f"{'MET ' if ok else 'MISS'} a member added to a stream of {gb:.2f} GB is in sync "
            f"in no more time than RabbitMQ's add_replica: {_s(a)}{rate} vs {_s(b)}{vs}"]


def _s(v: float | None) -> str:
    return "never" if v is None else f"{v:,.2f} s"


def _ms(v: float | None) -> str:
    return "none" if v is None else f"{v:,.0f} ms"


def plot(rows: list[Row], path: Path, title: str) -> None:
    """Throughput bars (log scale) and latency bars for both servers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    servers = [s for s in ("rabbitmq", "streamlet") if any(r.server == s for r in rows)]
    colors = {"rabbitmq": "#ff6600", "streamlet": "#1f77b4"}
    thr = [k for k in dict.fromkeys(r.workload for r in rows)
           if k not in ("latency", "r3-latency", "r3-failover")]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.5),
                                   gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / max(1, len(servers))
    by = {(r.workload, r.server): r for r in rows}
    for i, srv in enumerate(servers):
        vals = [by[(k, srv)].msg_s if (k, srv) in by else 0 for k in thr]
        xs = [x + i * width for x in range(len(thr))]
        ax1.bar(xs, vals, width, label=srv, color=colors[srv])
    ax1.set_yscale("log")
    ax1.set_xticks([x + width * (len(servers) - 1) / 2 for x in range(len(thr))])
    ax1.set_xticklabels(thr, rotation=30, ha="right")
    ax1.set_ylabel("messages / s (log scale)")
    ax1.set_title("throughput")
    ax1.legend()
    lat = [(srv, by[("latency", srv)]) for srv in servers if ("latency", srv) in by]
    for i, (srv, r) in enumerate(lat):
        ax2.bar([0 + i * width, 1 + i * width], [r.p50_ms or 0, r.p99_ms or 0], width,
                label=srv, color=colors[srv])
    ax2.set_xticks([width * (len(lat) - 1) / 2, 1 + width * (len(lat) - 1) / 2])
    ax2.set_xticklabels(["p50", "p99"])
    ax2.set_ylabel("publish-to-deliver latency, ms")
    ax2.set_title("latency at a fixed rate")
    ax2.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def to_json(rows: list[Row], physical: dict[str, float], meta: dict[str, Any],
            notes: list[str] | None = None) -> dict[str, Any]:
    return {"meta": meta, "physical_mb_s": physical, "rows": [r.as_dict() for r in rows],
            "targets": targets(rows, physical, notes)}


BEGIN = "<!-- bench:results:begin (written by python -m bench.run --update-doc) -->"
END = "<!-- bench:results:end -->"


def results_section(rows: list[Row], physical: dict[str, float], meta: dict[str, Any],
                    plot_name: str | None, notes: list[str] | None = None) -> str:
    """The generated part of docs/performance.md."""
    sizes = " (quick sizes: not representative)" if meta.get("quick") else ""
    parts = [
        BEGIN,
        f"Run of {meta.get('date')} on {meta.get('cpus')} CPUs ({meta.get('machine')}, Linux "
        f"{meta.get('kernel')}, Python {meta.get('python')}), RabbitMQ "
        f"{meta.get('rabbitmq') or 'not run'}, streamlet at commit "
        f"{meta.get('streamlet_commit')}{sizes}.",
        "",
        table(rows),
        "",
    ]
    if physical:
        parts += ["Physical references on the same machine: "
                  + ", ".join(f"{k} {v:,.0f} MB/s" for k, v in physical.items()) + ".", ""]
    lines = targets(rows, physical, notes)
    if lines:
        parts += ["Targets:", ""] + [f"- {line}" for line in lines] + [""]
    if plot_name:
        parts += [f"![throughput and latency, both servers]({plot_name})", ""]
    parts.append(END)
    return "\n".join(parts)


def update_doc(path: Path, section: str) -> None:
    """Replace the generated section of ``path`` (or append it when the markers are absent)."""
    text = path.read_text() if path.exists() else "# Performance\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)
