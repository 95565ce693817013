"""Sampling profiles of the streamlet broker during a workload, with py-spy (optional).

``python -m bench.run --profile DIR`` records one profile per workload in py-spy's raw
(collapsed stack) format, idle time included so a broker waiting on its clients shows as
waiting, and writes the frames that take the most samples beside it.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path


def py_spy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def recording(pid: int, out: Path, rate: int = 250) -> Iterator[None]:
    exe = py_spy()
    if exe is None:
        raise RuntimeError("--profile needs py-spy (pip install py-spy)")
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--idle",
         "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attach before the load starts
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def top_frames(raw: Path, n: int = 15) -> tuple[int, list[tuple[float, str]], list[tuple[float, str]]]:
    """Samples, the frames with the most self samples, and with the most inclusive samples,
    as (percent, frame)."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        total += k
        frames = stack.split(";")
        self_c[frames[-1]] += k
        for fr in set(frames[1:]):  # the first frame is the process/thread
            incl[fr] += k
    if not total:
        return 0, [], []

    def pct(c: Counter[str]) -> list[tuple[float, str]]:
        return [(100 * v / total, k) for k, v in c.most_common(n)]

    return total, pct(self_c), pct(incl)


def summary(raw: Path, n: int = 15) -> str:
    total, selfs, incls = top_frames(raw, n)
    lines = [f"{raw.name}: {total} samples (idle included)", "  self:"]
    lines += [f"    {p:5.1f}%  {fr}" for p, fr in selfs]
    lines.append("  inclusive:")
    lines += [f"    {p:5.1f}%  {fr}" for p, fr in incls]
    return "\n".join(lines)
