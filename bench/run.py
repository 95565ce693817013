"""Run the benchmark workloads against RabbitMQ and streamlet and print them side by side.

    python -m bench.run [--quick] [--only streamlet|rabbitmq] [--json out.json]
                        [--plot docs/performance.png]

Both servers are started, and each workload runs on RabbitMQ then at once on streamlet, so a
change in the machine's background load hits both alike (``--sequential``: one server at a
time). Both keep their data in one temporary directory on the same disk, removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "broker_image") not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO / "broker_image"))
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import physical, profiling, report  # noqa: E402
from bench.addmember import add_member  # noqa: E402
from bench.replicated import replicated  # noqa: E402
from bench.servers import (  # noqa: E402
    ClusterServer,
    RabbitCluster,
    RabbitMQ,
    Server,
    ServerError,
    Streamlet,
    StreamletCluster,
)
from bench.workloads import WORKLOADS, Row, Sizes  # noqa: E402

SERVERS = ("rabbitmq", "streamlet")
#: the workloads on 3-node clusters, both on the same clusters (bench.replicated, bench.addmember)
CLUSTER_WORKLOADS = ["replicated", "add-member"]
#: the workloads on single brokers, then those on 3-node clusters
ALL_WORKLOADS = [*WORKLOADS, *CLUSTER_WORKLOADS]
#: how long the 3-node RabbitMQ may take to come up before the replicated workload goes on
#: with streamlet alone
RABBIT_CLUSTER_TIMEOUT = 120.0


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def started(name: str, root: Path, args: argparse.Namespace) -> Iterator[Server]:
    srv: Server
    if name == "rabbitmq":
        srv = RabbitMQ.start(root, stream_port=args.rabbitmq_port, amqp_port=args.amqp_port)
    else:
        srv = Streamlet.start(root, port=args.streamlet_port)
    log(f"{name} up on 127.0.0.1:{srv.port} (pid {srv.pid}, RSS {srv.rss() / 1e6:.0f} MB)")
    try:
        yield srv
    finally:
        srv.stop()
        log(f"{name} stopped")


@contextlib.contextmanager
def started_cluster(name: str, root: Path) -> Iterator[ClusterServer]:
    srv: ClusterServer
    t0 = time.monotonic()
    if name == "rabbitmq":
        srv = RabbitCluster.start(root, timeout=RABBIT_CLUSTER_TIMEOUT)
    else:
        srv = StreamletCluster.start(root)
    log(f"{name} 3-node cluster up on 127.0.0.1:{','.join(map(str, srv.ports))} "
        f"in {time.monotonic() - t0:.0f} s (pids {srv.node_pids()})")
    try:
        yield srv
    finally:
        srv.stop()
        log(f"{name} 3-node cluster stopped")


def run_one(name: str, srv: Server, key: str, sizes: Sizes, run_no: int = 0) -> list[Row]:
    t0 = time.monotonic()
    if key == "replicated":
        assert isinstance(srv, ClusterServer)
        rows = replicated(srv, sizes, run_no)
    elif key == "add-member":
        assert isinstance(srv, ClusterServer)
        rows = add_member(srv, sizes.add_bytes, run_no)
    else:
        rows = WORKLOADS[key](srv, sizes)
    for r in rows:
        log(f"{name:9} {r.workload:13} {r.msg_s:>12,.0f} msg/s {r.mb_s:>8,.1f} MB/s "
            f"exact={r.exact} ({time.monotonic() - t0:.1f} s)")
        if r.workload == "r3-failover":
            log(f"  failover {r.extra.get('failover_ms') or float('nan'):.1f} ms after the kill (connection lost "
                f"at {r.extra.get('lost_ms')} ms, new leader attached at "
                f"{r.extra.get('reattached_ms')} ms, {r.extra.get('attempts')} attempts)")
        if r.workload == "r3-add-member":
            log(f"  added node {r.extra.get('added')}: in sync {r.extra.get('add_s')} s after "
                f"the command's start, not yet at {r.extra.get('not_in_sync_s')} s (the command "
                f"itself {r.extra.get('command_s')} s, {r.extra.get('polls')} looks by "
                f"{r.extra.get('in_sync_by')}) {r.extra.get('error', '')}")
        for e in r.extra.get("server_errors", []):
            log(f"  server said: {e}")
    return rows


#: rows ranked by a time in ``extra`` (lowest first)
_SECONDS_KEY = {"r3-failover": "failover_ms", "r3-add-member": "add_s"}


def _rank(r: Row) -> float:
    """Best first: the lowest p99 (latency rows), the fastest failover or member add, else the
    most msg/s."""
    if r.workload in ("latency", "r3-latency"):
        return r.p99_ms or 0.0
    if r.workload in _SECONDS_KEY:
        v = r.extra.get(_SECONDS_KEY[r.workload])
        return float("inf") if v is None else float(v)
    return -r.msg_s


def median_rows(runs: list[list[Row]]) -> list[Row]:
    """Of repeated runs of one workload on one server, keep the median row of each kind (by
    msg/s, or by p99 for latency rows); the others stay in ``extra['repeats']``."""
    kinds: dict[str, list[Row]] = {}
    for rows in runs:
        for r in rows:
            kinds.setdefault(r.workload, []).append(r)
    out = []
    for same in kinds.values():
        ranked = sorted(same, key=_rank)
        mid = ranked[len(ranked) // 2]
        if len(same) > 1:
            mid.extra["repeats"] = [
                {"msg_s": r.msg_s, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms, "exact": r.exact,
                 "records_per_chunk": r.records_per_chunk,
                 **({_SECONDS_KEY[r.workload]: r.extra.get(_SECONDS_KEY[r.workload])}
                    if r.workload in _SECONDS_KEY else {})}
                for r in same]
            # every repeat must have been exact for the kept row to say so
            if not all(r.exact for r in same):
                mid.errors += sum(r.errors for r in same) or 1
        out.append(mid)
    return out


def run_replicated(servers: list[str], root: Path, sizes: Sizes, args: argparse.Namespace,
                   notes: list[str], keys: list[str]) -> list[Row]:
    """The cluster workloads ``keys`` on a 3-node cluster of each server, interleaved,
    ``repeat`` times. A RabbitMQ cluster that does not come up in time leaves streamlet's
    side alone, with a note saying so."""
    runs: dict[str, list[list[Row]]] = {}
    with contextlib.ExitStack() as stack:
        clusters: dict[str, ClusterServer] = {}
        for name in servers:
            try:
                clusters[name] = stack.enter_context(started_cluster(name, root))
            except ServerError as e:
                if name != "rabbitmq":
                    raise
                log(f"rabbitmq 3-node cluster: {e}")
                notes.append("INFO the 3-node RabbitMQ cluster did not come up within "
                             f"{RABBIT_CLUSTER_TIMEOUT:.0f} s ({str(e)[:200]}): the "
                             f"{', '.join(keys)} workload is reported for streamlet alone")
        for i in range(args.repeat):
            for key in keys:
                for name, srv in clusters.items():
                    runs.setdefault(name, []).append(run_one(name, srv, key, sizes, i))
    rows = [r for name in servers for r in median_rows(runs.get(name, []))]
    kinds = list(dict.fromkeys(r.workload for r in rows))
    return sorted(rows, key=lambda r: (kinds.index(r.workload), servers.index(r.server)))


def run_all(servers: list[str], root: Path, sizes: Sizes, selected: list[str],
            args: argparse.Namespace, notes: list[str] | None = None) -> list[Row]:
    rows = run_single(servers, root, sizes, [k for k in selected if k in WORKLOADS], args)
    keys = [k for k in CLUSTER_WORKLOADS if k in selected]
    if keys:
        rows += run_replicated(servers, root, sizes, args, notes if notes is not None else [],
                               keys)
    return rows


def run_single(servers: list[str], root: Path, sizes: Sizes, selected: list[str],
               args: argparse.Namespace) -> list[Row]:
    """Interleaved (default): both servers up, each workload run on one then the other, so a
    change in the machine's background load hits both alike. Sequential: one server at a
    time, the other stopped. Each workload runs ``repeat`` times; the median is kept."""
    runs: dict[tuple[str, str], list[list[Row]]] = {}
    if not selected:
        return []

    def one(name: str, srv: Server, key: str, last: bool = True) -> None:
        for _ in range(args.repeat if args.sequential else 1):
            runs.setdefault((key, name), []).append(run_one(name, srv, key, sizes))
        if args.profile and name == "streamlet" and last:
            # one more run under py-spy, kept out of the table: sampling costs the broker time
            out = args.profile / f"{key}.txt"
            with profiling.recording(srv.pid, out):
                run_one(f"{name}+py-spy", srv, key, sizes)
            log(profiling.summary(out))
            (args.profile / f"{key}-top.txt").write_text(profiling.summary(out, 40) + "\n")

    if args.sequential:
        for name in servers:
            with started(name, root, args) as srv:
                for key in selected:
                    one(name, srv, key)
    else:
        with contextlib.ExitStack() as stack:
            srvs = {name: stack.enter_context(started(name, root, args)) for name in servers}
            for key in selected:
                for i in range(args.repeat):
                    for name in servers:
                        one(name, srvs[name], key, last=i == args.repeat - 1)
    rows = [r for key in selected for name in servers
            for r in median_rows(runs.get((key, name), []))]
    return rows


def measure_physical(root: Path, total: int) -> dict[str, float]:
    log(f"physical references with {total >> 20} MB")
    return {
        "loopback TCP": physical.loopback_mb_s(total),
        "sequential disk write": physical.disk_write_mb_s(root, total),
    }


def meta(sizes: Sizes, args: argparse.Namespace) -> dict[str, object]:
    def cmd(*c: str) -> str:
        try:
            return subprocess.run(c, capture_output=True, text=True, timeout=10,
                                  cwd=REPO).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(), "machine": platform.machine(), "kernel": platform.release(),
        "python": platform.python_version(),
        "rabbitmq": cmd("dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"),
        "streamlet_commit": cmd("git", "rev-parse", "--short", "HEAD"),
        "quick": args.quick, "repeat": args.repeat, "sequential": args.sequential,
        "sizes": asdict(sizes),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="scaled-down sizes (smoke test)")
    p.add_argument("--only", choices=SERVERS, help="run against one server only")
    p.add_argument("--workloads", default=",".join(ALL_WORKLOADS),
                   help=f"comma-separated subset of {','.join(ALL_WORKLOADS)} (replicated: "
                        "3-node clusters of both servers, bench/replicated.py; add-member: "
                        "a member added to a filled stream of 2 on the same clusters, "
                        "bench/addmember.py; protocols: "
                        "MEGA and RSIO beside the RabbitMQ protocol, streamlet only, "
                        "bench/protocols.py)")
    p.add_argument("--add-member-mb", type=int, default=None, metavar="MB",
                   help="MB (of 1,000 B messages) in the stream add-member adds a member to "
                        "(default 1000, quick 20)")
    p.add_argument("--no-physical", action="store_true",
                   help="skip the loopback and disk references")
    p.add_argument("--pub-procs", type=int, default=1,
                   help="publisher processes sharing the stream in the single-stream workloads")
    p.add_argument("--sequential", action="store_true",
                   help="run one server at a time (default: both up, workloads interleaved)")
    p.add_argument("--repeat", type=int, default=None,
                   help="runs of each workload; the median is reported (default 3, quick 1)")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="also profile streamlet in one extra run per workload with py-spy "
                        "(raw stacks and top frames in DIR; not counted in the table)")
    p.add_argument("--json", type=Path, help="write rows, references and targets here")
    p.add_argument("--plot", type=Path, help="write a PNG of throughput and latency here")
    p.add_argument("--update-doc", type=Path,
                   help="rewrite the generated results section of this Markdown file")
    p.add_argument("--workdir", type=Path, default=None,
                   help="where the temporary data directory goes (default: system temp)")
    p.add_argument("--streamlet-port", type=int, default=0, help="default: a free port")
    p.add_argument("--rabbitmq-port", type=int, default=5553, help="RabbitMQ stream port")
    p.add_argument("--amqp-port", type=int, default=5673, help="RabbitMQ AMQP port")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = Sizes.quick() if args.quick else Sizes()
    sizes.pub_procs = args.pub_procs
    if args.add_member_mb is not None:
        sizes.add_bytes = args.add_member_mb * 1_000_000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    selected = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in selected if w not in ALL_WORKLOADS]
    if unknown:
        print(f"unknown workloads: {unknown}; choose from {ALL_WORKLOADS}", file=sys.stderr)
        return 2
    servers = [args.only] if args.only else list(SERVERS)
    root = Path(tempfile.mkdtemp(prefix="streamlet-bench-", dir=args.workdir))
    rows: list[Row] = []
    refs: dict[str, float] = {}
    notes: list[str] = []
    try:
        if not args.no_physical:
            refs = measure_physical(root, sizes.physical_bytes)
        rows = run_all(servers, root, sizes, selected, args, notes)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    info = meta(sizes, args)
    who = (f"{args.only} only" if args.only else f"streamlet vs RabbitMQ {info['rabbitmq']}")
    print(f"\n{who} - {info['date']}, {info['cpus']} CPUs"
          f"{' (quick sizes)' if args.quick else ''}\n")
    print(report.table(rows))
    if refs:
        print("\nphysical references: " + ", ".join(f"{k} {v:,.0f} MB/s" for k, v in refs.items()))
    lines = report.targets(rows, refs, notes)
    if lines:
        print("\ntargets:\n  " + "\n  ".join(lines))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_json(rows, refs, info, notes), indent=1))
    if args.plot:
        try:
            report.plot(rows, args.plot, f"{who}, "
                        f"{info['date']}, {info['cpus']} CPUs")
        except ImportError:
            log("matplotlib is not installed: no plot (pip install matplotlib)")
            args.plot = None
    if args.update_doc:
        plot_name = None
        if args.plot:
            plot_name = os.path.relpath(args.plot.resolve(), args.update_doc.resolve().parent)
        report.update_doc(args.update_doc,
                          report.results_section(rows, refs, info, plot_name, notes))
    return 0 if all(r.exact for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
