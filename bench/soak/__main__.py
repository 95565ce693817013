"""``python -m bench.soak``: start a broker on loopback in a temporary data dir, run the
phases, print each one's figures and a summary; exit 1 if any guarantee broke."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import fuzz, hold, kills
from .common import MB, RSS_WAIT_S, Broker, PhaseResult, raise_nofile

PHASES = ("fuzz", "hold", "kills")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    p.add_argument("--fuzz-frames", type=int, default=1_000_000, help="frames per protocol")
    p.add_argument("--fuzz-workers", type=int, default=2, help="fuzzing processes")
    p.add_argument("--fuzz-max-seconds", type=float, default=900, help="give up (and fail) after")
    p.add_argument("--connections", type=int, default=10_000, help="connections held at once")
    p.add_argument("--hold-seconds", type=float, default=30, help="how long they are held")
    p.add_argument("--kills", type=int, default=10, help="kill -9 rounds")
    p.add_argument("--phases", default=",".join(PHASES),
                   help="comma-separated, run in the order given (a phase may repeat: hold,hold)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: the time)")
    p.add_argument("--workdir", type=Path, default=None, help="kept; default a temporary dir")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--rss-wait", type=float, default=RSS_WAIT_S,
                   help="seconds to wait after each phase before the RSS figure (at least one of "
                        "the broker's memory-return ticks)")
    return p.parse_args(argv)


def print_phase(r: PhaseResult) -> None:
    status = "ok" if r.ok else "FAILED"
    figures = ", ".join(f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in r.figures.items())
    print(f"[{r.name}] {status} in {r.seconds:.0f} s: {figures}", flush=True)
    print(f"[{r.name}] broker RSS start {r.rss_start / MB:.1f} MB, peak {r.rss_peak / MB:.1f} MB, "
          f"end {r.rss_end / MB:.1f} MB", flush=True)
    for failure in r.failures:
        print(f"[{r.name}] FAILURE: {failure}", flush=True)


def print_summary(results: list[PhaseResult]) -> None:
    print("\n| phase | result | figures | RSS start → peak → end (MB) | time |")
    print("|---|---|---|---|---|")
    keys = {"fuzz": ("frames", "connections", "bystander_msgs"),
            "hold": ("connections", "answered_at_end", "bystander_msgs"),
            "kills": ("kills", "confirmed", "messages_verified")}
    for r in results:
        figs = ", ".join(f"{k} {r.figures[k]:,}" for k in keys.get(r.name, ()) if k in r.figures)
        print(f"| {r.name} | {'ok' if r.ok else 'FAILED'} | {figs} | "
              f"{r.rss_start / MB:.0f} → {r.rss_peak / MB:.0f} → {r.rss_end / MB:.0f} | {r.seconds:.0f} s |")


async def run(args: argparse.Namespace, root: Path) -> list[PhaseResult]:
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = set(phases) - set(PHASES)
    if unknown:
        raise SystemExit(f"unknown phase(s): {', '.join(sorted(unknown))}")
    broker = Broker(root, rss_wait=args.rss_wait).start()
    print(f"broker pid {broker.pid} on 127.0.0.1:{broker.port}, data in {broker.data_dir}, "
          f"seed {args.seed}", flush=True)
    results: list[PhaseResult] = []
    try:
        for name in phases:
            if not broker.alive():
                results.append(PhaseResult(name, failures=["not run: the broker is down"]))
                continue
            print(f"[{name}] starting", flush=True)
            try:
                if name == "fuzz":
                    r = await fuzz.run(broker, args.fuzz_frames, args.fuzz_workers,
                                       args.fuzz_max_seconds, args.seed)
                elif name == "hold":
                    r = await hold.run(broker, args.connections, args.hold_seconds)
                else:
                    r = await kills.run(broker, args.kills, args.seed)
            except Exception:  # noqa: BLE001 - a harness bug or an unforeseen broker answer
                r = PhaseResult(name, failures=[f"the phase raised:\n{traceback.format_exc()}"])
            results.append(r)
            print_phase(r)
    finally:
        broker.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seed is None:
        args.seed = int(time.time())
    raise_nofile()  # 10,000 held connections: one fd each on this side too
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    t0 = time.monotonic()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="streamlet-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        results = asyncio.run(run(args, root))
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    print_summary(results)
    ok = all(r.ok for r in results)
    print(f"\nsoak {'passed' if ok else 'FAILED'} in {time.monotonic() - t0:.0f} s (started {started})")
    if args.json:
        args.json.write_text(json.dumps({
            "started": started, "seed": args.seed, "ok": ok,
            "phases": [{"name": r.name, "ok": r.ok, "figures": r.figures, "rss_start": r.rss_start,
                        "rss_peak": r.rss_peak, "rss_end": r.rss_end, "seconds": round(r.seconds, 1),
                        "failures": r.failures} for r in results]}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
