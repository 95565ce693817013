"""`streamlet consume`: a stream's messages as 'offset<TAB>body' lines on standard output.

With --name and no --offset it resumes after the offset stored under that name; the offset of
the last message written is stored when it ends, however it ends (--count, --timeout, a closed
pipe, SIGINT or SIGTERM)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ..amqp import AmqpError, decode_message
from ..client import Client, OffsetSpec
from .output import Output, OutputClosed
from .stop import stop


def offset_spec(text: str) -> OffsetSpec:
    if text.startswith("@"):
        return OffsetSpec.timestamp(int(text[1:]))
    if text.isdigit():
        return OffsetSpec.offset(int(text))
    return OffsetSpec.parse(text)


async def start(client: Client, args: argparse.Namespace) -> tuple[OffsetSpec, str]:
    """Where to start, and why (for the summary)."""
    if args.offset is not None:
        return offset_spec(args.offset), ""
    if args.name:
        stored = await client.query_offset(args.name, args.stream)
        if stored is not None:
            return OffsetSpec.offset(stored + 1), f", resumed after offset {stored}"
    return OffsetSpec.first(), ""


def line(offset: int, body: bytes) -> bytes:
    return b"%d\t%s\n" % (offset, body.decode("utf-8", "replace").encode())


class AmqpBodies:
    """--format amqp: a message's AMQP 1.0 body; one that is not AMQP stays raw (said once)."""

    def __init__(self) -> None:
        self.warned = False

    def __call__(self, offset: int, body: bytes) -> bytes:
        try:
            return decode_message(body).body or b""
        except (AmqpError, ValueError, TypeError):
            if not self.warned:
                self.warned = True
                print(f"streamlet: the message at offset {offset} is not AMQP 1.0: printed "
                      "as stored (and any others like it)", file=sys.stderr)
            return body


async def consume(client: Client, args: argparse.Namespace) -> int:
    spec, resumed = await start(client, args)
    consumer = await client.consumer(args.stream, offset=spec, name=args.name)
    out = Output()
    amqp = AmqpBodies() if args.format == "amqp" else None
    seen, last, why = 0, None, ""
    try:
        chunks = aiter(consumer.chunks())
        while args.count is None or seen < args.count:
            try:
                _, records, first = await asyncio.wait_for(anext(chunks), args.timeout)
            except (TimeoutError, StopAsyncIteration):
                break
            if args.count is not None:
                records = records[: args.count - seen]
            if amqp is not None:
                records = [amqp(first + i, bytes(r)) for i, r in enumerate(records)]
            out.write(b"".join([line(first + i, r) for i, r in enumerate(records)]))
            out.flush()  # a chunk at a time: a pipe sees messages as they come
            seen += len(records)
            last = first + len(records) - 1
    except OutputClosed:
        why = " (output closed)"
    except asyncio.CancelledError as e:
        stop.caught(e)
        why = " (interrupted)"
    stored = ""
    if args.name and last is not None:
        await consumer.store_offset(last)
        stored = f", offset {last} stored for {args.name}"
    await consumer.close()
    print(f"consumed {seen} messages from {args.stream}{resumed}{stored}{why}", file=sys.stderr)
    return stop.exit_code if stop.requested else 0
