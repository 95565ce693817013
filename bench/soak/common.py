"""What every phase shares: the broker process it soaks, RSS readings and its result row."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.servers import free_port, rss_bytes, wait_port
from streamlet.broker.memory import TRIM_INTERVAL_S

REPO = Path(__file__).resolve().parents[2]
MB = 1024 * 1024
#: RSS after a phase (load stopped) must come back within this much of the phase's start.
RSS_SLACK = 50 * MB
#: How long to wait, polling, for RSS to settle after a phase's load stops.
RSS_SETTLE_S = 30.0
#: ... and at least this long (``--rss-wait``): one of the broker's memory-return ticks, so the
#: figure is what it keeps, not what it has not given back yet.
RSS_WAIT_S = TRIM_INTERVAL_S + 2
#: After a storm of connections closes (the hold phase), the broker gives back what they took
#: without waiting for its memory-return tick: within STORM_RETURN_S of the last close its RSS
#: must be back within STORM_KEEP of the storm's growth (start to peak) over its start, or
#: STORM_FLOOR (what a small storm's figures cannot tell from noise).
STORM_RETURN_S = 3.0
STORM_KEEP = 0.35
STORM_FLOOR = 10 * MB


class SoakFailure(Exception):
    """A guarantee broke: the message says which, with the figures."""


def raise_nofile() -> None:
    """Soft RLIMIT_NOFILE to the hard limit: 10,000 held connections need that many fds on both
    ends (used in this process and as the broker's preexec_fn)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def nofile_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass
class Broker:
    """``python -m streamlet serve`` on a loopback port, restartable on the same data dir."""

    root: Path
    max_connections: int = 12_000
    #: after a phase, how long settle_rss waits at least before taking the RSS figure
    rss_wait: float = RSS_WAIT_S
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "broker.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Broker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.root / "broker.toml"
        # The default limit is 10,000 connections; the hold phase needs 10,000 plus bystanders.
        config.write_text(f"[limits]\nmax_connections = {self.max_connections}\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "broker_image"), env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "streamlet", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--data-dir", str(self.data_dir),
               "--config", str(config), "--log-level", "WARNING"]
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts + 1} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.root, start_new_session=True,
                                         preexec_fn=raise_nofile)
        self.starts += 1
        wait_port(self.port, 60, self.alive)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL, as a crash: nothing flushed, nothing closed."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def exit_status(self) -> str:
        if self.proc is None:
            return "never started"
        rc = self.proc.poll()
        return "running" if rc is None else f"exited with {rc}"

    def rss(self) -> int:
        return rss_bytes(self.pid) if self.alive() else 0

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def fds(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return 0


async def settle_rss(broker: Broker, start: int, slack: int = RSS_SLACK,
                     timeout: float = RSS_SETTLE_S) -> tuple[int, float]:
    """Poll the broker's RSS until it is within ``slack`` of ``start`` (or ``timeout``): the
    figure after load, and how long it took."""
    t0 = time.monotonic()
    rss = broker.rss()
    least = min(broker.rss_wait, timeout)
    while (rss > start + slack or time.monotonic() - t0 < least) and time.monotonic() - t0 < timeout:
        await asyncio.sleep(1.0)
        rss = broker.rss()
    return rss, time.monotonic() - t0


@dataclass
class PhaseResult:
    """One row of the summary; ``failures`` empty means every guarantee held."""

    name: str
    figures: dict[str, int | float | str] = field(default_factory=dict)
    rss_start: int = 0
    rss_peak: int = 0
    rss_end: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def check_rss(self, settle_s: float) -> None:
        self.figures["rss_settle_s"] = round(settle_s, 1)
        if self.rss_end > self.rss_start + RSS_SLACK:
            self.fail(f"broker RSS {self.rss_end / MB:.1f} MB after the phase is more than "
                      f"{RSS_SLACK // MB} MB over its start ({self.rss_start / MB:.1f} MB), "
                      f"after waiting {settle_s:.0f} s")


class RssSampler:
    """Samples the broker's RSS every ``period`` s in the background: the phase's peak."""

    def __init__(self, broker: Broker, period: float = 0.5) -> None:
        self.broker, self.period, self.peak = broker, period, 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, self.broker.rss())
            await asyncio.sleep(self.period)

    def __enter__(self) -> RssSampler:
        self.peak = self.broker.rss()
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
        self.peak = max(self.peak, self.broker.rss())
