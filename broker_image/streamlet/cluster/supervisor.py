"""The supervisor of ``cluster up``: runs every node's broker and restarts one that exits, as a
kubelet restarts a pod's container, until SIGINT or SIGTERM stops them all.

Each node has a task: start, wait for the exit, back off (:mod:`.backoff`), start again (a
default metrics or HTTP port taken meanwhile left off, as ``up`` leaves it off). Every change
goes to ``cluster.json`` (:mod:`.state`). ``stop-node`` keeps a node down (``--wipe``: its
data deleted, a lost volume) until ``start-node`` (requests, :mod:`.requests`). A placement
driver runs beside the nodes as a ``Driver``: a task of its own, cancelled at stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Protocol

from . import requests
from . import state as state_file
from .backoff import DEFAULT_POLICY, BackoffPolicy, next_delay
from .plan import GRACE_S, STATE_FILE, NodeSpec, settle_defaults
from .probe import bind_error
from .state import ClusterState, NodeState

#: How often the supervisor looks for stop-node and start-node requests.
REQUEST_POLL_S = 0.2

log = logging.getLogger("streamlet.cluster")

class Driver(Protocol):
    """Runs beside the nodes while the supervisor does (e.g. a placement driver electing
    stream leaders and writing ``supervisor.directory_file``). It may read
    ``supervisor.state`` and await ``supervisor.changed()``; it is cancelled at stop."""

    async def run(self, supervisor: Supervisor) -> None: ...


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec function giving the child SIGTERM when the supervisor dies, however it dies
    (Linux's PR_SET_PDEATHSIG), so a kill -9 of the supervisor leaves no broker holding a port."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before prctl: go now
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


class Supervisor:
    def __init__(self, specs: Sequence[NodeSpec], data_dir: Path, host: str,
                 log_level: str = "INFO", policy: BackoffPolicy = DEFAULT_POLICY,
                 grace: float = GRACE_S, directory_file: Path | None = None,
                 drivers: Sequence[Driver] = (), optional_ports: Collection[str] = ()) -> None:
        """``optional_ports``: the NodeSpec port fields (``metrics_port``, ``http_port``) that
        are defaults, left off at a restart when their port is taken."""
        self.specs = list(specs)
        self.optional_ports = set(optional_ports)
        self.data_dir = data_dir
        self.directory_file = directory_file
        self.log_level = log_level
        self.policy = policy
        self.grace = grace
        self.drivers = list(drivers)
        self.state = ClusterState(os.getpid(), host, [
            NodeState(s.index, s.port, metrics_port=s.metrics_port, http_port=s.http_port,
                      log=str(s.log_file)) for s in specs])
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        #: nodes kept down by stop-node, until start-node
        self._held: set[int] = set()
        self._stopping = False
        self._stop: asyncio.Event | None = None
        self._changed: asyncio.Condition | None = None
        self._preexec = _die_with_parent()

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    def stop(self) -> None:
        """Stop every node and return from :meth:`run` (what SIGINT and SIGTERM do)."""
        if not self._stopping:
            log.info("stopping %d nodes (SIGTERM, SIGKILL after %.0f s)", len(self.specs),
                     self.grace)
        self._stopping = True
        if self._stop is not None:
            self._stop.set()

    async def changed(self) -> None:
        """Return at the next change of ``state`` (a node started or exited)."""
        assert self._changed is not None, "the supervisor is not running"
        async with self._changed:
            await self._changed.wait()

    async def run(self) -> int:
        """Run the nodes until :meth:`stop`; 0 once every one has stopped."""
        self._stop = asyncio.Event()
        self._changed = asyncio.Condition()
        if self._stopping:
            self._stop.set()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop)
        try:
            await self._save()
            keepers = [asyncio.create_task(self._keep_logged(spec)) for spec in self.specs]
            drivers = [asyncio.create_task(self._drive(d)) for d in self.drivers]
            drivers.append(asyncio.create_task(self._take_requests()))
            first, last = self.specs[0], self.specs[-1]
            log.info("cluster up: %d nodes on %s:%d..%d, data in %s; stop it with Ctrl-C or "
                     "'streamlet cluster down --data-dir %s'", len(self.specs), first.host,
                     first.port, last.port, self.data_dir, self.data_dir)
            await self._stop.wait()
            for d in drivers:
                d.cancel()
            await asyncio.gather(*drivers, return_exceptions=True)
            await self._stop_nodes(keepers)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            with contextlib.suppress(FileNotFoundError):
                self.state_path.unlink()
        log.info("cluster stopped")
        return 0

    async def _drive(self, driver: Driver) -> None:
        try:
            await driver.run(self)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("driver %r failed; the nodes keep running", driver)

    async def _take_requests(self) -> None:
        """stop-node and start-node requests, as they come (a failure logged, never fatal)."""
        assert self._stop is not None
        while not self._stopping:
            for r in requests.read(self.data_dir, requests.NODE_KINDS):
                try:
                    why_not = await (self.stop_node(r.to, r.wipe) if r.kind == requests.STOP_NODE
                                     else self.start_node(r.to))
                except Exception as e:
                    log.exception("%s %s failed", r.kind, r.to)
                    why_not = f"{r.kind} {r.to} failed: {e}"
                requests.done(self.data_dir, r, why_not)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), REQUEST_POLL_S)

    async def stop_node(self, index: int | None, wipe: bool = False) -> str | None:
        """Stop node ``index`` (SIGTERM, SIGKILL after the grace) and keep it down until
        :meth:`start_node`; ``wipe``: then delete its data (not its configuration nor its
        log), as if its volume were lost. Why not, or None."""
        if index is None or not 0 <= index < len(self.specs):
            return f"no node {index}: the nodes are 0..{len(self.specs) - 1}"
        spec, node = self.specs[index], self.state.nodes[index]
        self._held.add(index)
        node.stopped = True
        await self._save()
        proc = self._procs.get(index)
        if proc is not None:
            log.info("node %d: stopping pid %d, as asked (kept down until start-node)", index,
                     proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), self.grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        while node.alive:  # its keeper records the exit
            await asyncio.sleep(0.05)
        if wipe:
            keep = {spec.config_file, spec.log_file}
            for p in list(spec.data_dir.iterdir()) if spec.data_dir.is_dir() else []:
                if p in keep:
                    continue
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
            log.warning("node %d: its data in %s deleted, as asked", index, spec.data_dir)
        return None

    async def start_node(self, index: int | None) -> str | None:
        """Run node ``index`` again after :meth:`stop_node` (its keeper starts it)."""
        if index is None or not 0 <= index < len(self.specs):
            return f"no node {index}: the nodes are 0..{len(self.specs) - 1}"
        if index not in self._held:
            return None if self.state.nodes[index].alive else f"node {index} is restarting"
        self._held.discard(index)
        self.state.nodes[index].stopped = False
        await self._save()
        log.info("node %d: started again, as asked", index)
        return None

    async def _save(self) -> None:
        state_file.write(self.state_path, self.state)
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    async def _start(self, spec: NodeSpec) -> asyncio.subprocess.Process:
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        spec.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log_file, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} started by streamlet "
                      f"cluster (supervisor pid {os.getpid()})\n".encode())
            out.flush()
            return await asyncio.create_subprocess_exec(
                *spec.command(self.log_level), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=self._preexec)

    async def _keep_logged(self, spec: NodeSpec) -> None:
        try:
            await self._keep(spec)
        except Exception:
            log.exception("node %d: no longer supervised", spec.index)

    async def _keep(self, spec: NodeSpec) -> None:
        """Node ``spec.index``'s life: start, wait for the exit, back off, start again."""
        node = self.state.nodes[spec.index]
        delay: float | None = None
        while not self._stopping:
            assert self._stop is not None
            while spec.index in self._held and not self._stopping:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), REQUEST_POLL_S)
            if self._stopping:
                return
            if delay is not None and self.optional_ports:  # a restart
                spec = self._without_taken(spec)
            try:
                proc = await self._start(spec)
            except OSError as e:
                delay = next_delay(delay, 0.0, self.policy)
                log.error("node %d: cannot start: %s; trying again in %.1f s", spec.index, e,
                          delay)
            else:
                self._procs[spec.index] = proc
                if self._stopping:  # stopped while it was starting
                    proc.terminate()
                started = time.monotonic()
                node.pid, node.alive, node.started_at = proc.pid, True, time.time()
                await self._save()
                log.info("node %d: pid %d on %s:%d (log %s)", spec.index, proc.pid, spec.host,
                         spec.port, spec.log_file)
                code = await proc.wait()
                del self._procs[spec.index]
                ran_for = time.monotonic() - started
                node.alive = False
                await self._save()
                if self._stopping:
                    log.info("node %d: pid %d stopped (%s)", spec.index, proc.pid,
                             _exit_text(code))
                    return
                if spec.index in self._held:
                    log.info("node %d: pid %d stopped (%s), kept down until start-node",
                             spec.index, proc.pid, _exit_text(code))
                    delay = None
                    continue
                delay = next_delay(delay, ran_for, self.policy)
                log.warning("node %d: pid %d exited with %s after %.1f s; restarting in "
                            "%.1f s", spec.index, proc.pid, _exit_text(code), ran_for, delay)
            assert self._stop is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            if not self._stopping:
                node.restarts += 1

    def _without_taken(self, spec: NodeSpec) -> NodeSpec:
        """``spec`` with its default side ports that are taken now turned off (logged)."""
        taken = {p for field in self.optional_ports
                 if (p := getattr(spec, field)) and bind_error(spec.host, p) is not None}
        if not taken:
            return spec
        [settled], notes = settle_defaults([spec], self.optional_ports, taken)
        for note in notes:
            log.warning("%s", note)
        node = self.state.nodes[spec.index]
        node.metrics_port, node.http_port = settled.metrics_port, settled.http_port
        return settled

    async def _stop_nodes(self, keepers: list[asyncio.Task[None]]) -> None:
        for proc in list(self._procs.values()):
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        _, pending = await asyncio.wait(keepers, timeout=self.grace)
        if pending:
            for index, proc in list(self._procs.items()):
                log.warning("node %d: pid %d did not stop in %.0f s: SIGKILL", index, proc.pid,
                            self.grace)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await asyncio.wait(pending)
