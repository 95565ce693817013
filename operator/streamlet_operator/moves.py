"""Moving a stream between broker pods without losing a confirmed message.

A move, driven by the Stream reconciler across as many passes as it needs: copy the stream to
the new pod (``copy_stream``), record the placement and write the directory naming the new pod,
wait until the old pod has sealed its stream (``sealed``), copy the tail, delete the old stream.
Copies publish with ``MOVE_REFERENCE`` and publishing id = source offset + 1, so an interrupted
copy is resumed, never doubled. Stored consumer offsets are not copied.
Mechanism: docs/operations.md#5-scale, docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import time

from .brokers import BrokerSession

#: The new pod's publisher reference for copied messages (its dedup key; never a client's).
MOVE_REFERENCE = "streamlet-operator-move"
#: How long one pass waits for the old pod to seal before leaving it to the next pass.
SEAL_WAIT_S = 5.0
SEAL_POLL_S = 0.2


async def copy_stream(source: BrokerSession, target: BrokerSession, name: str,
                      follow: bool = True) -> int:
    """Copy to ``target`` what it lacks of ``name`` on ``source``, up to source's last chunk;
    return how many messages were copied. Resumes after the last message copied before.

    ``follow``: also copy chunks that arrive meanwhile, until caught up (for a sealed source,
    which gets none). Without, stop at the last chunk when the copy started: a copy chasing
    producers faster than itself would never end."""
    stats = await source.stream_stats(name)
    if stats.last_offset < 0:
        return 0
    start = await target.publisher_sequence(name, MOVE_REFERENCE)  # next source offset to copy
    copied = 0
    # At most the last chunk's start: a subscription past the end would wait for new chunks.
    async with source.read(name, min(start, stats.last_offset)) as chunks, \
            target.write(name, MOVE_REFERENCE) as writer:
        async for chunk_id, first, records in chunks:
            if first < start:  # the start of a chunk copied before
                records, first = records[start - first:], start
            if records:
                await writer.send(records, first + 1)  # confirms awaited once, below
                copied += len(records)
            if chunk_id >= stats.last_offset:
                if not follow:
                    break
                # Caught up with the snapshot: done unless more arrived meanwhile.
                stats = await source.stream_stats(name)
                if chunk_id >= stats.last_offset:
                    break
        await writer.flush()  # every copied message confirmed, or the copy fails
    return copied


async def sealed(source: BrokerSession, names: list[str], wait: float = SEAL_WAIT_S) -> bool:
    """Whether the old pod has sealed all of ``names`` (or no longer has them), waiting up to
    ``wait`` seconds: it seals once its directory file names the new pod, which on a cluster
    the kubelet may take a minute to deliver, so the caller comes back on a later pass."""
    deadline = time.monotonic() + wait
    while True:
        done = True
        for name in names:
            if await source.stream_exists(name) and not (await source.stream_stats(name)).sealed:
                done = False
                break
        if done:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(SEAL_POLL_S)
