"""Phase 2: N connections open at once, every one handshaken (Open answered), held with
heartbeats for a while; a bystander still works beside them; each still answers at the end;
then all are closed and the broker's memory must come back: most of what the storm took within
seconds (STORM_KEEP, STORM_RETURN_S), and within the memory rule once settled."""

from __future__ import annotations

import asyncio
import random
import time

from streamlet.rabbitmq import frames as f

from .bystander import Bystander
from .common import (
    MB,
    STORM_FLOOR,
    STORM_KEEP,
    STORM_RETURN_S,
    Broker,
    PhaseResult,
    RssSampler,
    nofile_limit,
    settle_rss,
)
from .peer import Peer, PeerClosed

OPEN_CONCURRENCY = 200   # handshakes in flight at once
HEARTBEAT_S = 10         # agreed in Tune: the broker closes a peer silent for 20-30 s
BYSTANDER_S = 5.0        # how long the bystander runs beside the held connections


async def _open(port: int, sem: asyncio.Semaphore) -> Peer:
    async with sem:
        peer = await Peer.connect(port, timeout=60)
        try:
            await peer.handshake(heartbeat=HEARTBEAT_S, timeout=60)
        except BaseException:
            peer.abort()
            raise
        return peer


async def _keep_alive(peer: Peer, stop: asyncio.Event) -> None:
    """A heartbeat every half interval (jittered so 10,000 do not beat in step)."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), HEARTBEAT_S / 2 * random.uniform(0.8, 1.0))
        except TimeoutError:
            peer.send(f.Heartbeat())


async def _ping(peer: Peer, sem: asyncio.Semaphore) -> None:
    async with sem:
        await peer.request(f.Metadata(peer.next_corr(), ["soak-hold"]), f.MetadataResponse, timeout=60)


async def _storm_returned(broker: Broker, res: PhaseResult) -> None:
    """Right after the storm (its sockets closed on the broker's side): RSS must fall within
    STORM_KEEP of its growth over the start (STORM_FLOOR at least) in STORM_RETURN_S."""
    allowed = max(STORM_KEEP * (res.rss_peak - res.rss_start), STORM_FLOOR)
    t0 = time.monotonic()
    rss = broker.rss()
    while rss > res.rss_start + allowed and time.monotonic() - t0 < STORM_RETURN_S:
        await asyncio.sleep(0.25)
        rss = broker.rss()
    res.figures.update(rss_returned_mb=round(rss / MB, 1),
                       returned_s=round(time.monotonic() - t0, 2))
    if rss > res.rss_start + allowed:
        res.fail(f"broker RSS {rss / MB:.1f} MB {STORM_RETURN_S:.0f} s after the connections "
                 f"closed: more than {allowed / MB:.1f} MB over its start "
                 f"({res.rss_start / MB:.1f} MB; {STORM_KEEP:.0%} of the "
                 f"{(res.rss_peak - res.rss_start) / MB:.1f} MB they took)")


async def run(broker: Broker, connections: int, hold_s: float) -> PhaseResult:
    res = PhaseResult("hold")
    t0 = time.monotonic()
    res.rss_start = broker.rss()
    fds_start = broker.fds()
    if nofile_limit() < connections + 100:
        res.fail(f"RLIMIT_NOFILE is {nofile_limit()} here: {connections} connections need more")
        return res
    sem = asyncio.Semaphore(OPEN_CONCURRENCY)
    peers: list[Peer] = []
    stop = asyncio.Event()
    keepers: list[asyncio.Task[None]] = []
    with RssSampler(broker) as sampler:
        try:
            opening = [asyncio.create_task(_open(broker.port, sem)) for _ in range(connections)]
            outcomes = await asyncio.gather(*opening, return_exceptions=True)
            errors = [o for o in outcomes if isinstance(o, BaseException)]
            peers = [o for o in outcomes if isinstance(o, Peer)]
            opened_s = time.monotonic() - t0
            res.figures.update(connections=len(peers), open_s=round(opened_s, 1),
                               open_per_s=round(len(peers) / max(opened_s, 1e-6)))
            if errors:
                res.fail(f"{len(errors)} of {connections} connections could not be opened, first: "
                         f"{type(errors[0]).__name__}: {errors[0]}")
            res.figures["broker_fds_held"] = broker.fds()
            keepers = [asyncio.create_task(_keep_alive(p, stop)) for p in peers]
            beside = min(BYSTANDER_S, hold_s)
            await asyncio.sleep(hold_s - beside)
            # A bystander, at the end of the hold, beside all of them.
            bystander = Bystander(broker.port, "soak-bystander-hold")
            try:
                await bystander.start()
                await asyncio.sleep(beside)
                report = await bystander.stop()
                res.figures["bystander_msgs"] = report.consumed
                for e in report.errors:
                    res.fail(f"bystander beside {len(peers)} connections: {e}")
            except (OSError, TimeoutError, PeerClosed) as e:
                res.fail(f"bystander could not work beside {len(peers)} connections: {e}")
            res.figures["held_s"] = round(time.monotonic() - t0 - opened_s, 1)
            # Every held connection must still answer.
            pings = await asyncio.gather(*(_ping(p, sem) for p in peers), return_exceptions=True)
            lost = [p for p in pings if isinstance(p, BaseException)]
            res.figures["answered_at_end"] = len(peers) - len(lost)
            if lost:
                res.fail(f"{len(lost)} of {len(peers)} held connections did not answer at the end, "
                         f"first: {type(lost[0]).__name__}: {lost[0]}")
        finally:
            stop.set()
            for k in keepers:
                k.cancel()
            for p in peers:
                p.writer.close()
            await asyncio.gather(*(p.close() for p in peers), return_exceptions=True)
    res.rss_peak = sampler.peak
    res.figures["peak_kb_per_connection"] = round((res.rss_peak - res.rss_start) / 1024 / max(1, len(peers)), 1)
    # The broker's side of the sockets: back to where it started (a few may linger briefly).
    deadline = time.monotonic() + 30
    while broker.fds() > fds_start + 10 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    res.figures["broker_fds_after"] = broker.fds()
    if broker.fds() > fds_start + 10:
        res.fail(f"broker holds {broker.fds()} fds after closing, {fds_start} before")
    if not broker.alive():
        res.fail(f"broker {broker.exit_status()}; log tail:\n{broker.log_tail()}")
    await _storm_returned(broker, res)
    res.rss_end, settle = await settle_rss(broker, res.rss_start)
    res.check_rss(settle)
    res.seconds = time.monotonic() - t0
    return res
