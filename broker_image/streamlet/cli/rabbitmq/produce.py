"""`streamlet produce`: standard input's lines (or --count generated messages) to a stream.

With --reference, message i of the input (line i, or generated message i, from 1) gets
publishing id i, and the messages up to the sequence the broker stored for the reference are
skipped: re-running an import that failed half-way stores each line once."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from ...amqp import encode_data
from ...client import Client, Producer, StreamletError
from ..lines import line_batches
from ..progress import Progress
from ..stop import stop
from ..words import messages
from .session import opener_for, session, stream_of

#: generated messages handed to the producer at a time
STEP = 10000
#: seconds an interrupted produce waits for the confirms of what it sent
CONFIRM_WAIT_S = 5.0


async def run(args: argparse.Namespace) -> int:
    return await session(args, lambda client: _produce_on(client, args))


async def _produce_on(client: Client, args: argparse.Namespace) -> int:
    args.stream = await stream_of(client, args)
    if args.create:
        await client.create_stream(args.stream, exists_ok=True)
    leader = await client.leader(args.stream)
    if leader is not None and not client.is_local(leader):
        # the stream lives on another broker (a pod of the same cluster): go there
        print(f"streamlet: {args.stream} is on {leader[0]}:{leader[1]}", file=sys.stderr)
        async with await opener_for(args)(*leader) as owner:
            return await produce(owner, args)
    return await produce(client, args)


async def produce(client: Client, args: argparse.Namespace) -> int:
    producer = await client.producer(args.stream, reference=args.reference)
    stored = producer.next_publishing_id - 1 if args.reference else 0
    counts = {"sent": 0, "skipped": 0}
    progress = Progress(f"published to {args.stream}", args.count)
    try:
        if args.count is not None:
            await _generated(producer, args, stored, counts, progress)
        else:
            await _stdin(producer, stored, counts, progress, args.format == "amqp")
        await producer.close()  # every confirm awaited (a signal here is an interruption too)
    except asyncio.CancelledError as e:
        stop.caught(e)
        progress.done()
        with contextlib.suppress(TimeoutError, StreamletError):
            async with asyncio.timeout(CONFIRM_WAIT_S):
                await producer.close()
        sent = producer.next_publishing_id - 1 - stored  # a cancelled send_many sent part
        print(f"streamlet: interrupted: {producer.confirmed_count} of {messages(sent)} "
              f"sent to {args.stream} confirmed{_skipped(counts, args)}", file=sys.stderr)
        return stop.exit_code
    finally:
        progress.done()
    print(f"published {messages(counts['sent'])} to {args.stream}{_skipped(counts, args)}",
          file=sys.stderr)
    return 0


def _skipped(counts: dict[str, int], args: argparse.Namespace) -> str:
    n = counts["skipped"]
    return f" ({n} skipped: stored before under reference {args.reference})" if n else ""


async def _generated(producer: Producer, args: argparse.Namespace, stored: int,
                     counts: dict[str, int], progress: Progress) -> None:
    body = encode_data(b"x" * args.size) if args.format == "amqp" else b"x" * args.size
    counts["skipped"] = min(stored, args.count)
    remaining = args.count - counts["skipped"]
    while remaining:
        n = min(remaining, STEP)
        await producer.send_many([body] * n)
        counts["sent"] += n
        remaining -= n
        progress.update(counts["sent"] + counts["skipped"])


async def _stdin(producer: Producer, stored: int, counts: dict[str, int],
                 progress: Progress, amqp: bool) -> None:
    seen = 0  # lines read so far: line i gets id i when a reference numbers them
    async for lines in line_batches():
        skip = min(max(stored - seen, 0), len(lines))
        seen += len(lines)
        counts["skipped"] += skip
        if skip < len(lines):
            batch = lines[skip:]
            await producer.send_many([encode_data(x) for x in batch] if amqp else batch)
            counts["sent"] += len(lines) - skip
        progress.update(seen)
