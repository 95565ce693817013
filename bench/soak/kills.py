"""Phase 3: rounds of publishers under load, ``kill -9`` of the broker at a random moment,
a restart on the same data dir, and a full read of every stream: each publisher's messages
must be there exactly once, in publish order, every confirmed one included; and the broker's
recovered publisher sequence must be where the log ends (so deduplication resumes)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass
from typing import Any

from streamlet.client import Client, StreamletError, connect

from .common import Broker, PhaseResult, RssSampler, SoakFailure, settle_rss

STREAMS = ("soak-kills-a", "soak-kills-b")  # suffixed per run: the phase may run twice
PUBLISHERS = 4                   # two per stream: their messages interleave in chunks
RATE = 40_000                    # msg/s per publisher: bounded, so the reads stay short
BATCH = 100
BODY_PAD = b"." * 80             # ~100-byte messages
IDLE_READ_S = 5.0                # a read that gets nothing for this long has reached the end


@dataclass
class Publisher:
    index: int
    run: str                     # a suffix of this run's stream and reference names
    stored: int = 0              # messages of this publisher in the log, as last verified
    confirmed: int = 0           # highest id confirmed (ids are 1, 2, 3... per publisher)
    confirmed_total: int = 0     # confirms received over all rounds

    @property
    def stream(self) -> str:
        return f"{STREAMS[self.index % len(STREAMS)]}-{self.run}"

    @property
    def reference(self) -> str:
        return f"soak-kill-{self.index}-{self.run}"

    def body(self, pid: int) -> bytes:
        return b"p%d-%010d" % (self.index, pid) + BODY_PAD


async def _publish_until_killed(port: int, pub: Publisher, started: asyncio.Event) -> tuple[float, str]:
    """Publish at RATE until the connection dies; track the highest confirmed id. The
    producer's ids resume from the broker's publisher sequence (reference). Returns when and
    how it ended (the caller checks that was after the kill)."""
    client = await connect("127.0.0.1", port, timeout=30)
    producer = await client.producer(pub.stream, reference=pub.reference, max_unconfirmed=5_000,
                                     batch_size=BATCH)
    if producer.next_publishing_id != pub.stored + 1:
        await client.close()
        raise SoakFailure(f"{pub.reference}: broker's publisher sequence is "
                          f"{producer.next_publishing_id - 1}, the log holds {pub.stored}")
    t0, sent = time.monotonic(), 0
    base = producer.confirmed_count
    try:
        while True:
            first = producer.next_publishing_id
            await producer.send_many([pub.body(i) for i in range(first, first + BATCH)])
            sent += BATCH
            if producer.last_confirmed is not None:
                pub.confirmed = max(pub.confirmed, producer.last_confirmed)
                started.set()
            ahead = sent / RATE - (time.monotonic() - t0)
            await asyncio.sleep(max(0.0, ahead))
    except StreamletError as e:  # the kill: ConnectionClosed, or a send cut short
        return time.monotonic(), f"{type(e).__name__}: {e}"
    finally:
        if producer.last_confirmed is not None:
            pub.confirmed = max(pub.confirmed, producer.last_confirmed)
        pub.confirmed_total += producer.confirmed_count - base
        if not client.closed:
            await _quiet_close(client)


async def _quiet_close(client: Client) -> None:
    with contextlib.suppress(Exception):  # the connection may be dead already
        await client.close()


async def _verify(port: int, pubs: list[Publisher], resume: dict[str, int] | None) -> int:
    """Read every stream and return the messages read. ``resume`` (stream -> offset) reads only
    what came after the previous check, from each publisher's last verified message on; None
    reads everything from the first offset. Raises SoakFailure on a missing, repeated,
    reordered or foreign message, or a confirmed one not stored."""
    client = await connect("127.0.0.1", port, timeout=60)
    read = 0
    try:
        for stream in sorted({p.stream for p in pubs}):
            mine = {p.index: p for p in pubs if p.stream == stream}
            seen = {i: (p.stored if resume is not None else 0) for i, p in mine.items()}
            offset = resume.get(stream, 0) if resume is not None else 0
            last = (await client.stream_stats(stream))["last_chunk_id"]
            consumer = await client.consumer(stream, offset=offset, credit=20)
            it = consumer.chunks().__aiter__()
            while last >= 0:
                try:
                    header, records, first = await asyncio.wait_for(it.__anext__(), IDLE_READ_S)
                except TimeoutError:
                    break
                for rec in records:
                    head = bytes(rec[:13])
                    idx, pid = int(head[1:2]), int(head[3:13])
                    if idx not in mine or pid != seen[idx] + 1 or bytes(rec) != mine[idx].body(pid):
                        raise SoakFailure(
                            f"{stream}: after publisher {idx}'s message {seen.get(idx)} came "
                            f"{bytes(rec[:20])!r}: lost, repeated or out of order")
                    seen[idx] = pid
                read += len(records)
                offset = first + len(records)
                if header.chunk_id >= last:
                    break
            await consumer.close()
            for idx, pub in mine.items():
                if seen[idx] < pub.confirmed:
                    raise SoakFailure(f"{stream}: publisher {idx} had {pub.confirmed} confirmed, "
                                      f"only {seen[idx]} are in the stream")
                if resume is None and seen[idx] != pub.stored:
                    raise SoakFailure(f"{stream}: publisher {idx}: {seen[idx]} messages in the final "
                                      f"read, {pub.stored} when last checked")
                pub.stored = seen[idx]
            if resume is not None:
                resume[stream] = offset
    finally:
        await _quiet_close(client)
    return read


async def run(broker: Broker, kills: int, seed: int, min_delay: float = 0.5,
              max_delay: float = 3.0) -> PhaseResult:
    res = PhaseResult("kills")
    t0 = time.monotonic()
    rng = random.Random(seed)
    res.rss_start = broker.rss()
    run_id = str(time.time_ns())
    pubs = [Publisher(i, run_id) for i in range(PUBLISHERS)]
    setup = await connect("127.0.0.1", broker.port, timeout=60)
    for s in {p.stream for p in pubs}:
        await setup.create_stream(s)
    await setup.close()
    survived, verified_reads, peak = 0, 0, 0
    resume: dict[str, int] = {}
    try:
        for _ in range(kills):
            started = [asyncio.Event() for _ in pubs]
            tasks = [asyncio.create_task(_publish_until_killed(broker.port, p, e))
                     for p, e in zip(pubs, started, strict=True)]
            with RssSampler(broker) as sampler:
                # Every publisher confirmed something, then a random moment under load (a
                # publisher that ends before the kill is a failure, reported below).
                progress = asyncio.ensure_future(asyncio.gather(*(e.wait() for e in started)))
                watched: set[asyncio.Future[Any]] = {progress, *tasks}
                await asyncio.wait(watched, timeout=60, return_when=asyncio.FIRST_COMPLETED)
                if progress.done():
                    await asyncio.sleep(rng.uniform(min_delay, max_delay))
                progress.cancel()
                killed_at = time.monotonic()
                broker.kill9()
            peak = max(peak, sampler.peak)
            outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
            for o in outcomes:
                if isinstance(o, BaseException):
                    raise o if isinstance(o, SoakFailure) else SoakFailure(
                        f"a publisher failed: {type(o).__name__}: {o}")
                if o[0] < killed_at:
                    raise SoakFailure(f"a publisher failed before the kill: {o[1]}")
            if not all(e.is_set() for e in started):
                raise SoakFailure("a publisher had no confirm within 60 s")
            broker.start()
            verified_reads += await _verify(broker.port, pubs, resume)
            survived += 1
        # Everything again from the first offset: no later crash damaged what an earlier
        # round checked.
        verified_reads += await _verify(broker.port, pubs, None)
    except (SoakFailure, OSError, StreamletError, TimeoutError) as e:
        res.fail(f"round {survived + 1}: {type(e).__name__}: {e}")
        if not broker.alive():
            res.fail(f"broker {broker.exit_status()}; log tail:\n{broker.log_tail()}")
    res.rss_peak = peak
    res.figures.update(
        kills=survived, confirmed=sum(p.confirmed_total for p in pubs),
        stored=sum(p.stored for p in pubs),
        stored_unconfirmed=sum(p.stored - p.confirmed for p in pubs),
        messages_verified=verified_reads)
    if broker.alive():
        res.rss_end, settle = await settle_rss(broker, res.rss_start)
        res.check_rss(settle)
    res.seconds = time.monotonic() - t0
    return res
