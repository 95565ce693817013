"""`streamlet perf` itself: set up the streams, start the workers, release them together,
print a live line a second, then stop publishing, drain, and sum up.

Counts come from a shared array the workers write and this process reads every 100 ms, so
each second's rates are exact differences; latency histograms come over a queue. Ctrl-C or
SIGTERM (cli/stop.py, whose ``caught`` the command passes in) ends the run early with the same
summary."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import queue as queue_
import signal
import sys
import time
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from typing import Any

from ..client import StreamletError
from . import report, stats
from .plan import Worker, assign, stream_names
from .wire import Target, open_connection
from .worker import SLOTS, Spec, main

#: seconds between reads of the shared counters
POLL_S = 0.1
#: how long workers may take to connect and subscribe
READY_S = 60.0
#: after publishing stops: the longest wait for outstanding confirms (interrupted: shorter)
CONFIRM_WAIT_S, CONFIRM_WAIT_INTERRUPTED_S = 10.0, 3.0
#: consumers draining what was confirmed: given up after this long without progress
DRAIN_STALL_S = 5.0
#: the workers' last reports and exit
FINISH_S = 15.0


class PerfError(Exception):
    """Ends the run before it started, with a one-line reason (exit 1)."""


def target_of(args: argparse.Namespace) -> Target:
    return Target(args.host, args.port, args.user, args.password, args.vhost, args.tls,
                  args.ca_cert, args.cert, args.key, args.sasl_mechanism)


async def perf(args: argparse.Namespace,
               caught: Callable[[asyncio.CancelledError], None]) -> int:
    """The run; ``caught`` is called where it catches a cancellation (a signal's, which it
    lets through to its summary, or another, which it re-raises)."""
    streams = stream_names(args.streams, args.stream_count)
    target = target_of(args)
    try:
        server = await _prepare(target, streams, args.create)
    except PerfError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 1
    run = Run(args, target, streams, caught)
    try:
        code = await run.execute()
    finally:
        run.shut_down()
    if args.delete_streams:
        await _delete(target, streams)
    doc = report.summary(run.totals, {
        "server": server, "streams": streams, "producers": args.producers,
        "consumers": args.consumers, "size": args.size, "batch_size": args.batch_size,
        "confirm_window": args.confirm_window, "rate": args.rate, "time_s": args.time,
        "offset": args.offset, "processes": args.processes})
    print(report.to_json(doc) if args.json else report.summary_text(doc), flush=True)
    return code


async def _prepare(target: Target, streams: list[str], create: bool) -> str:
    """Create the streams (or check that they exist); the server's name and version."""
    try:
        _, client = await open_connection(target, name="perf-control")
    except (OSError, TimeoutError) as e:
        raise PerfError(f"cannot connect to {target.host}:{target.port}: {e}") from e
    except StreamletError as e:
        raise PerfError(str(e)) from e
    async with client:
        try:
            for s in streams:
                if create:
                    await client.create_stream(s, exists_ok=True)
                elif not await client.stream_exists(s):
                    raise PerfError(f"stream {s} does not exist (leave out --no-create to "
                                    "create it)")
        except StreamletError as e:
            raise PerfError(f"cannot create {s}: {e}") from e
        props = client.server_properties
        return f"{props.get('product', 'a broker')} {props.get('version', '')}".strip()


async def _delete(target: Target, streams: list[str]) -> None:
    try:
        _, client = await open_connection(target, name="perf-control")
        async with client:
            for s in streams:
                await client.delete_stream(s, missing_ok=True)
    except (OSError, TimeoutError, StreamletError) as e:
        print(f"streamlet: could not delete the streams: {e}", file=sys.stderr)


class Run:
    def __init__(self, args: argparse.Namespace, target: Target, streams: list[str],
                 caught: Callable[[asyncio.CancelledError], None]) -> None:
        self.args = args
        self.caught = caught
        self.workers: list[Worker] = assign(streams, args.producers, args.consumers,
                                            args.processes, args.rate)
        self.ctx = mp.get_context("spawn")  # never fork a process that runs an event loop
        self.counters: Any = self.ctx.RawArray("q", SLOTS * (args.producers + args.consumers))
        self.go, self.stop, self.finish = self.ctx.Event(), self.ctx.Event(), self.ctx.Event()
        self.queue: Any = self.ctx.Queue()
        self.procs: list[BaseProcess] = []
        self.target = target
        self.totals = report.Totals()
        self.t0 = 0.0
        self.lost: list[str] = []
        self.done: set[str] = set()
        self._last = (0.0, 0, 0, 0)  # time, published, confirmed, consumed at the last line
        self._second: tuple[stats.Histogram, stats.Histogram] = ({}, {})
        self._stopped_s = float("inf")

    # --- the phases ------------------------------------------------------------------------

    async def execute(self) -> int:
        """0, or 1 when a connection was lost or a publish refused; the interruption's own
        code is the command's (cli/stop.py)."""
        try:
            self._start()
            await self._ready()
            self.go.set()
            self.t0 = time.monotonic()
            await self._measure()
        except asyncio.CancelledError as e:
            self.caught(e)
            self.totals.interrupted = True
        except PerfError as e:
            print(f"streamlet: {e}", file=sys.stderr)
            return 1
        if self.t0:
            try:
                await self._wind_down()
            except asyncio.CancelledError as e:  # only a second signal ends this; stop.py exits
                self.caught(e)
        self.totals.elapsed_s = time.monotonic() - self.t0 if self.t0 else 0.0
        failed = self.lost or self.totals.errored
        return 1 if failed else 0

    def _start(self) -> None:
        since = time.time_ns()
        # the workers start with Ctrl-C blocked, so one typed while they import cannot hit
        # them; they ignore it once running (the command tells them to finish)
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for w in self.workers:
                spec = Spec(w.name, w.roles, self.target, self.args.size, self.args.batch_size,
                            self.args.confirm_window, self.args.offset, since,
                            self.args.producers, self.counters, self.go, self.stop, self.finish,
                            self.queue)
                p = self.ctx.Process(target=main, args=(spec,), name=f"streamlet-perf-{w.name}",
                                     daemon=True)
                p.start()
                self.procs.append(p)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    async def _ready(self) -> None:
        waiting = {w.name for w in self.workers}
        deadline = time.monotonic() + READY_S
        while waiting:
            for msg in self._messages():
                if msg[0] == "ready":
                    waiting.discard(msg[1])
                elif msg[0] == "error":
                    raise PerfError(msg[2])
            for p in self.procs:
                if p.exitcode is not None and p.name.removeprefix("streamlet-perf-") in waiting:
                    raise PerfError(f"worker {p.name} exited with {p.exitcode} while starting")
            if time.monotonic() > deadline:
                raise PerfError(f"workers not connected after {READY_S:.0f} s: "
                                f"{', '.join(sorted(waiting))}")
            await asyncio.sleep(0.02)

    async def _measure(self) -> None:
        """Until --time is up (or forever): a poll every 100 ms, a line every second."""
        end = self.t0 + self.args.time if self.args.time else None
        second = 1
        while end is None or time.monotonic() < end:
            await asyncio.sleep(POLL_S)
            self._poll()
            if self.lost:
                return
            if time.monotonic() - self.t0 >= second:
                self._live(second)
                second += 1

    async def _wind_down(self) -> None:
        """Stop publishing; wait for the confirms; let the consumers read what was confirmed."""
        self.stop.set()
        self._stopped_s = time.monotonic() - self.t0  # publishing's own time, for its rate
        wait = CONFIRM_WAIT_INTERRUPTED_S if self.totals.interrupted else CONFIRM_WAIT_S
        deadline = time.monotonic() + wait
        await asyncio.sleep(0.05)  # the workers see the event within their 10 ms tick
        while time.monotonic() < deadline and not self._settled():
            await asyncio.sleep(POLL_S)
            self._poll()
        if self.totals.interrupted or self.lost:
            return
        consumed, last_change = -1, time.monotonic()
        while not self._drained():
            await asyncio.sleep(POLL_S)
            self._poll()
            now_consumed = self._consumer_sum(0)
            if now_consumed != consumed:
                consumed, last_change = now_consumed, time.monotonic()
            elif time.monotonic() - last_change > DRAIN_STALL_S:
                print(f"streamlet: consumers stopped at {self._consumer_sum(1):,} of the "
                      f"messages confirmed; not waiting longer", file=sys.stderr)
                return

    def shut_down(self) -> None:
        """Tell the workers to finish, take their last histograms, reap them (sync: this runs
        in a finally, also after a cancellation)."""
        self.stop.set()
        self.finish.set()
        deadline = time.monotonic() + FINISH_S
        started = {p.name.removeprefix("streamlet-perf-") for p in self.procs}
        while (started - self.done) and time.monotonic() < deadline:
            if all(p.exitcode is not None for p in self.procs):
                break
            for _ in self._messages(timeout=0.05):
                pass
        for _ in self._messages():
            pass
        if self.t0:
            self._poll()
        for p in self.procs:
            p.join(max(0.1, deadline - time.monotonic()))
            if p.exitcode is None:
                p.terminate()
                p.join(5)
        self.queue.close()

    # --- reading the workers ---------------------------------------------------------------

    def _messages(self, timeout: float = 0.0) -> Iterator[tuple[Any, ...]]:
        """What the workers sent since the last call; histograms are merged on the way."""
        while True:
            try:
                msg = self.queue.get(timeout=timeout) if timeout else self.queue.get_nowait()
            except (queue_.Empty, OSError, ValueError):
                return
            timeout = 0.0
            if msg[0] == "hist":
                _, kind, hist, top, _ = msg
                t = self.totals
                if kind == "confirm":
                    stats.merge(t.confirm_hist, hist)
                    stats.merge(self._second[0], hist)
                    t.confirm_max_us = max(t.confirm_max_us or 0, top)
                else:
                    stats.merge(t.consume_hist, hist)
                    stats.merge(self._second[1], hist)
                    t.consume_max_us = max(t.consume_max_us or 0, top)
            elif msg[0] == "lost":
                print(f"streamlet: {msg[2]}", file=sys.stderr)
                self.lost.append(msg[2])
            elif msg[0] == "done":
                self.done.add(msg[1])
            yield msg

    def _sum(self, offset: int, first: int, count: int) -> int:
        c = self.counters
        return sum(c[SLOTS * i + offset] for i in range(first, first + count))

    def _consumer_sum(self, offset: int) -> int:
        return self._sum(offset, self.args.producers, self.args.consumers)

    def _poll(self) -> None:
        for _ in self._messages():
            pass
        t, p = self.totals, self.args.producers
        now = time.monotonic() - self.t0
        published, confirmed = self._sum(0, 0, p), self._sum(1, 0, p)
        t.errored, consumed = self._sum(2, 0, p), self._consumer_sum(0)
        if published != t.published:
            t.published, t.published_s = published, min(now, self._stopped_s)
        if confirmed != t.confirmed:
            t.confirmed, t.confirmed_s = confirmed, now
        if consumed != t.consumed:
            t.consumed, t.consumed_s = consumed, now

    def _live(self, second: int) -> None:
        t, now = self.totals, time.monotonic() - self.t0
        last, self._last = self._last, (now, t.published, t.confirmed, t.consumed)
        took = now - last[0]
        confirm, consume = self._second
        self._second = ({}, {})
        print(report.live_line(second, stats.rate(t.published - last[1], took),
                               stats.rate(t.confirmed - last[2], took),
                               stats.rate(t.consumed - last[3], took), confirm, consume),
              file=sys.stderr, flush=True)

    def _settled(self) -> bool:
        c = self.counters
        return all(c[SLOTS * i + 1] + c[SLOTS * i + 2] >= c[SLOTS * i]
                   for i in range(self.args.producers))

    def _drained(self) -> bool:
        """Every consumer has read this run's confirmed messages of its stream."""
        confirmed: dict[str, int] = {}
        for w in self.workers:
            for r in w.roles:
                if r.kind == "producer":
                    confirmed[r.stream] = (confirmed.get(r.stream, 0)
                                           + self.counters[SLOTS * r.index + 1])
        c, p = self.counters, self.args.producers
        return all(c[SLOTS * (p + r.index) + 1] >= confirmed.get(r.stream, 0)
                   for w in self.workers for r in w.roles if r.kind == "consumer")

