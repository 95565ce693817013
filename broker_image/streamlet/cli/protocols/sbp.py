"""`produce` and `consume --protocol sbp` (docs/protocols/sbp.md): an APPEND frame of record
batches at a time; consume long-polls FETCH. SBP has no handshake: a PING first tells an SBP
listener from another port."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

from ...client.sbp import SbpClient, SbpError
from ...sbp import ErrorCode as Sbp
from . import PING_S, NotAListener, Record, Send, start

#: record batches per APPEND frame
BATCHES = 1000
#: a consume's long poll, when no --timeout bounds it
WAIT_MS = 5000

REFUSALS: tuple[type[Exception], ...] = (SbpError,)
NOT_LISTENER: tuple[type[Exception], ...] = ()
NAMED_OFFSETS = False

#: the error codes in words; None: the broker's own message says it
REASONS: dict[int, str | None] = {
    Sbp.UNKNOWN: None,
    Sbp.INVALID_REQUEST: None,
    Sbp.UNSUPPORTED_VERSION: "the broker speaks another version of SBP",
    Sbp.PD_NOT_LEADER: "this broker does not lead the placement driver",
    Sbp.STREAM_NOT_FOUND: "no such stream",
    Sbp.STREAM_EXISTS: "the stream exists",
    Sbp.NOT_PRIMARY: "this broker does not hold the stream's range (another does)",
    Sbp.RANGE_NOT_FOUND: "no such range",
    Sbp.OFFSET_OUT_OF_RANGE: "the offset is before the stream's first (removed by "
                             "retention)",
    Sbp.LIMIT_REACHED: "a limit of the broker was reached (streams or frame size)",
    Sbp.STORAGE_ERROR: "the broker could not write the stream (its log says why)",
    Sbp.NOT_SUPPORTED: "the broker does not support the request",
    Sbp.TIMEOUT: "the broker timed out",
}


async def connect(host: str, port: int) -> SbpClient:
    sbp = await SbpClient.connect(host, port)
    try:
        await asyncio.wait_for(sbp.ping(), PING_S)
    except (OSError, ConnectionError, TimeoutError, SbpError):
        await sbp.close()
        raise NotAListener("") from None
    return sbp


def produce(client: SbpClient, args: argparse.Namespace) -> Send:
    created = not args.create

    async def send(batch: list[bytes]) -> None:
        nonlocal created
        if not created:
            created = True
            try:
                await client.create_stream(args.stream)
            except SbpError as e:
                if e.code != Sbp.STREAM_EXISTS:
                    raise
        for i in range(0, len(batch), BATCHES):  # an APPEND frame each, a batch a line
            await client.append(args.stream, batch[i : i + BATCHES])

    return send


async def consume(client: SbpClient, args: argparse.Namespace) -> AsyncIterator[list[Record]]:
    wait_ms = WAIT_MS if args.timeout is None else max(int(args.timeout * 1000), 1)
    wait_ms, offset = min(wait_ms, WAIT_MS), int(start(args.offset))
    while True:
        got = await client.fetch(args.stream, offset, max_wait_ms=wait_ms, min_bytes=1)
        if got:  # else a long poll that ended empty: ask again
            yield [(at, body) for at, body in got]
            offset = got[-1][0] + 1


def reason(error: Exception) -> str:
    if isinstance(error, SbpError):
        words = REASONS.get(error.code, f"SBP error {error.code}")
        return words or error.message or f"SBP error {error.code}"
    return str(error)
