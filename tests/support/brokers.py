"""Real broker processes on loopback for tests: start, stop, kill -9, restart."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def distinct_ports(n: int) -> list[int]:
    """``n`` free ports, all different (free_port one after another may repeat one)."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


@contextlib.contextmanager
def holding(port: int, timeout: float = 120.0) -> Iterator[socket.socket]:
    """Listen on 127.0.0.1:``port`` for the block, so a broker started in it finds the port
    taken. Another test's broker may hold it now (a default port, under xdist) and let it go
    any moment, so wait until this test holds it itself; after ``timeout``, go on with it
    held by the other (taken all the same, as long as that holder keeps it)."""
    deadline = time.monotonic() + timeout
    with socket.socket() as holder:
        while True:
            try:
                holder.bind(("127.0.0.1", port))
                holder.listen()
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        yield holder


class PortTaken(RuntimeError):
    """The broker could not bind a port: another process took it after it was chosen free
    (tests run in parallel). Whoever chose the ports may choose again."""


def wait_for_port(host: str, port: int, timeout: float = 60.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout} s")


class BrokerProcess:
    """``python -m streamlet serve`` on a free loopback port, with its own data folder."""

    def __init__(self, data_dir: Path, port: int | None = None, config: Path | None = None,
                 extra_args: list[str] | None = None, env: dict[str, str] | None = None,
                 nofile: int | None = None) -> None:
        self.host = "127.0.0.1"
        #: RLIMIT_NOFILE (soft and hard) of the broker process, when given
        self.nofile = nofile
        self.port = port or free_port()
        self.data_dir = data_dir
        self.config = config
        self.extra_args = extra_args or []
        self.env = env or {}
        self.log_path = data_dir.parent / f"broker-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> BrokerProcess:
        args = [sys.executable, "-m", "streamlet", "serve", "--host", self.host,
                "--port", str(self.port), "--data-dir", str(self.data_dir)]
        if self.config is not None:
            args += ["--config", str(self.config)]
        args += self.extra_args
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        nofile = self.nofile

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **self.env}, preexec_fn=limit)
        log.close()
        self.wait_listening([self.port])
        return self

    def wait_listening(self, ports: Iterable[int]) -> None:
        """Wait until the broker listens on each of ``ports`` (its other listeners too);
        PortTaken when it could not bind one (its log says the address is in use)."""
        for port in ports:
            try:
                wait_for_port(self.host, port, proc=self.proc)
            except RuntimeError as e:
                said = self.log_path.read_text(errors="replace").strip()
                if "Address already in use" in said[-2000:]:
                    raise PortTaken(f"{e}: {said.splitlines()[-1]}") from e
                raise

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """kill -9: the crash the log must survive."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def rss_kib(self) -> int:
        """The broker process's resident memory, from /proc."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS in /proc status")

    def open_fds(self) -> int:
        """How many file descriptors the broker process has open, from /proc."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def settled_rss_kib(self, timeout: float = 30, samples: int = 5, tolerance_kib: int = 512) -> int:
        """The broker's RSS once it stops changing: ``samples`` readings in a row, 0.2 s apart,
        each within ``tolerance_kib`` of the one before (polled: the broker reads and frees on
        its own time); the last reading if ``timeout`` passes first."""
        last, stable, deadline = -1, 0, time.monotonic() + timeout
        while time.monotonic() < deadline and stable < samples:
            now = self.rss_kib()
            stable = stable + 1 if abs(now - last) < tolerance_kib else 0
            last = now
            time.sleep(0.2)
        return last

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
