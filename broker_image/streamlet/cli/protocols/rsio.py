"""`produce` and `consume --protocol rsio` (Reactive Streams IO,
docs/protocols/reactive-streams.md): a publish makes the stream itself with --create; consume
subscribes with a demand and reads from any offset, name or timestamp."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

from ...client.rsio import RsioClient, RsioError
from . import PING_S, NotAListener, Record, Send, start

#: elements asked for at once, unless --count asks for fewer
DEMAND = 512

REFUSALS: tuple[type[Exception], ...] = (RsioError,)
NOT_LISTENER: tuple[type[Exception], ...] = ()
NAMED_OFFSETS = True


async def connect(host: str, port: int) -> RsioClient:
    try:
        return await RsioClient.connect(host, port, timeout=PING_S)
    except RsioError as e:  # no Hello came back
        raise NotAListener(f": {e}") from None


def produce(client: RsioClient, args: argparse.Namespace) -> Send:
    async def send(batch: list[bytes]) -> None:
        await client.publish(args.stream, batch, create=args.create)

    return send


async def consume(client: RsioClient, args: argparse.Namespace) -> AsyncIterator[list[Record]]:
    demand = min(args.count, DEMAND) if args.count else DEMAND
    sub = await client.subscribe(args.stream, offset=start(args.offset), demand=demand)
    async for elements in sub.batches():
        yield [(e.offset, e.body) for e in elements]


def reason(error: Exception) -> str:
    return str(error)
