"""`streamlet produce|consume --protocol mega|rsio|sbp`: the same commands over MEGA
(docs/protocols/mega.md), Reactive Streams IO (docs/protocols/reactive-streams.md) and the
Streaming Batch Protocol (docs/protocols/sbp.md). Output is the RabbitMQ protocol's: consume
prints 'offset<TAB>body' lines."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator

from .client.mega import MegaClient, MegaError
from .client.rsio import RsioClient, RsioError
from .client.sbp import SbpClient, SbpError
from .mega import ErrorCode
from .sbp import ErrorCode as SbpCode

#: MEGA produces in flight at once (each answered once durable)
MEGA_PIPELINE = 100
#: how often a MEGA consume asks again for an offset not stored yet
MEGA_POLL_S = 0.2
#: record batches per SBP APPEND frame
SBP_BATCHES = 1000


def _bodies(args: argparse.Namespace) -> list[bytes]:
    if args.count is not None:
        return [b"x" * args.size] * args.count
    return [line.rstrip(b"\n") for line in sys.stdin.buffer]


async def run(args: argparse.Namespace) -> int:
    unsupported = [f"--{k}" for k in ("reference", "name") if getattr(args, k, None)]
    if unsupported:
        print(f"streamlet: {', '.join(unsupported)}: the RabbitMQ protocol's only",
              file=sys.stderr)
        return 2
    try:
        if args.protocol == "mega":
            async with await MegaClient.connect(args.host, args.port) as m:
                return await (_mega_produce(m, args) if args.command == "produce"
                              else _mega_consume(m, args))
        if args.protocol == "sbp":
            async with await SbpClient.connect(args.host, args.port) as c:
                return await (_sbp_produce(c, args) if args.command == "produce"
                              else _sbp_consume(c, args))
        async with await RsioClient.connect(args.host, args.port) as r:
            return await (_rsio_produce(r, args) if args.command == "produce"
                          else _rsio_consume(r, args))
    except (OSError, TimeoutError) as e:
        print(f"streamlet: cannot connect to {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    except (MegaError, RsioError, SbpError, ConnectionError) as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 1


def _print(offset: int | None, body: bytes) -> None:
    sys.stdout.write(f"{'' if offset is None else offset}\t{body.decode('utf-8', 'replace')}\n")


async def _mega_produce(c: MegaClient, args: argparse.Namespace) -> int:
    if args.create:
        try:
            await c.create_topic(args.stream)
        except MegaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
    bodies = _bodies(args)
    for i in range(0, len(bodies), MEGA_PIPELINE):
        await asyncio.gather(*[c.produce(args.stream, b) for b in bodies[i : i + MEGA_PIPELINE]])
    print(f"published {len(bodies)} messages to {args.stream}", file=sys.stderr)
    return 0


async def _mega_consume(c: MegaClient, args: argparse.Namespace) -> int:
    if args.offset != "first" and not args.offset.isdigit():
        print("streamlet: MEGA reads from an offset: --offset first or a number", file=sys.stderr)
        return 2
    offset = 0 if args.offset == "first" else int(args.offset)
    loop = asyncio.get_running_loop()
    seen, waited_since = 0, loop.time()
    while args.count is None or seen < args.count:
        try:
            _, body = await c.consume(args.stream, offset)
        except MegaError as e:
            if e.code != ErrorCode.INVALID_OFFSET:
                raise
            if args.timeout is not None and loop.time() - waited_since >= args.timeout:
                break
            await asyncio.sleep(MEGA_POLL_S)  # not stored yet: MEGA has no wait
            continue
        _print(offset, body)
        offset, seen, waited_since = offset + 1, seen + 1, loop.time()
    sys.stdout.flush()
    return 0


async def _rsio_produce(c: RsioClient, args: argparse.Namespace) -> int:
    sent = await c.publish(args.stream, _bodies(args), create=args.create)
    print(f"published {sent} messages to {args.stream}", file=sys.stderr)
    return 0


async def _rsio_consume(c: RsioClient, args: argparse.Namespace) -> int:
    offset: str | int = int(args.offset) if args.offset.isdigit() else args.offset
    demand = min(args.count, 512) if args.count else 512
    sub = await c.subscribe(args.stream, offset=offset, demand=demand)
    seen = 0
    it: AsyncIterator[object] = aiter(sub)
    try:
        while args.count is None or seen < args.count:
            try:
                element = await asyncio.wait_for(anext(it), args.timeout)
            except (TimeoutError, StopAsyncIteration):
                break
            _print(element.offset, element.body)  # type: ignore[attr-defined]
            seen += 1
    finally:
        sys.stdout.flush()
    return 0


async def _sbp_produce(c: SbpClient, args: argparse.Namespace) -> int:
    if args.create:
        try:
            await c.create_stream(args.stream)
        except SbpError as e:
            if e.code != SbpCode.STREAM_EXISTS:
                raise
    bodies = _bodies(args)
    for i in range(0, len(bodies), SBP_BATCHES):  # one APPEND frame each, a batch per message
        await c.append(args.stream, bodies[i : i + SBP_BATCHES])
    print(f"published {len(bodies)} messages to {args.stream}", file=sys.stderr)
    return 0


async def _sbp_consume(c: SbpClient, args: argparse.Namespace) -> int:
    start = args.offset or "first"
    if start != "first" and not start.isdigit():
        print("streamlet: SBP fetches from an offset: --offset first or a number", file=sys.stderr)
        return 2
    offset = 0 if start == "first" else int(start)
    wait_ms = 5000 if args.timeout is None else max(int(args.timeout * 1000), 1)
    seen = 0
    try:
        while args.count is None or seen < args.count:
            got = await c.fetch(args.stream, offset, max_wait_ms=wait_ms, min_bytes=1)
            if not got:  # a long poll that ended empty: --timeout passed
                if args.timeout is not None:
                    break
                continue
            for at, body in got[: None if args.count is None else args.count - seen]:
                _print(at, body)
                seen += 1
            offset = got[-1][0] + 1
    finally:
        sys.stdout.flush()
    return 0
