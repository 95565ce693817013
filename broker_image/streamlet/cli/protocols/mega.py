"""`produce` and `consume --protocol mega` (docs/protocols/mega.md): a pipeline of produce
requests, each answered once durable; consume asks for runs of offsets and polls for one not
stored yet (MEGA has no wait)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

from ...client.mega import MegaClient, MegaError, NotMega
from ...mega import ErrorCode as Mega
from . import Record, Send, start

#: messages a produce has in flight at once (each answered once durable)
PIPELINE = 100
#: offsets a consume asks for at once
RUN = 64
#: how often a consume asks again for an offset not stored yet
POLL_S = 0.2

REFUSALS: tuple[type[Exception], ...] = (MegaError,)
NOT_LISTENER: tuple[type[Exception], ...] = (NotMega,)
NAMED_OFFSETS = False

#: the error codes in words (docs/protocols/mega.md: what streamlet answers them for)
REASONS: dict[int, str] = {
    Mega.INVALID_REQUEST: "not a stream name the broker takes",
    Mega.INVALID_MESSAGE_TYPE: "the broker does not know the request",
    Mega.MESSAGE_TOO_LARGE: "a message is larger than the broker takes ([listeners.mega] "
                            "max_payload_bytes)",
    Mega.TOPIC_NOT_FOUND: "no such stream",
    Mega.TOPIC_ALREADY_EXISTS: "the stream exists",
    Mega.INVALID_OFFSET: "no message at that offset",
    Mega.INTERNAL_ERROR: "the broker failed (its log says why)",
    Mega.NETWORK_ERROR: "this broker does not lead the stream (sealed, moved, or led by "
                        "another member)",
    Mega.RESOURCE_EXHAUSTED: "a limit of the broker was reached (its log says which)",
}


async def connect(host: str, port: int) -> MegaClient:
    return await MegaClient.connect(host, port)


def produce(client: MegaClient, args: argparse.Namespace) -> Send:
    created = not args.create

    async def send(batch: list[bytes]) -> None:
        nonlocal created
        if not created:
            created = True
            try:
                await client.create_topic(args.stream)
            except MegaError as e:
                if e.code != Mega.TOPIC_ALREADY_EXISTS:
                    raise
        for i in range(0, len(batch), PIPELINE):
            await client.produce_many(args.stream, batch[i : i + PIPELINE])

    return send


async def consume(client: MegaClient, args: argparse.Namespace) -> AsyncIterator[list[Record]]:
    stream, offset = args.stream, int(start(args.offset))
    while True:
        try:
            got = await client.consume_run(stream, offset, RUN)
        except MegaError as e:
            if e.code != Mega.INVALID_OFFSET:
                raise
            await asyncio.sleep(POLL_S)  # not stored yet: MEGA has no wait
            continue
        yield [(offset + i, body) for i, (_, body) in enumerate(got)]
        offset += len(got)


def reason(error: Exception) -> str:
    if isinstance(error, MegaError):
        code = int(error.code)
        return REASONS.get(code, f"MEGA error {code}")
    return str(error)
