"""`streamlet produce|consume --protocol mega|rsio|sbp`: the same commands over MEGA
(docs/protocols/mega.md), Reactive Streams IO (docs/protocols/reactive-streams.md) and the
Streaming Batch Protocol (docs/protocols/sbp.md), behaving as the RabbitMQ protocol's: consume
prints 'offset<TAB>body' lines and ends with "consumed N messages from S" on stderr (" (output
closed)" when the reader of a pipe went away: exit 0); produce ends with "published N messages
to S"; SIGINT and SIGTERM end either with its summary and 130 or 143 (clitools.stop). A refusal
names the stream and a reason in words (:func:`reason`, pure), not the protocol's code."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, cast

from .lines import line_batches
from .output import Output, OutputClosed, next_while_read, until_reader_gone
from .stop import stop
from .words import messages

if TYPE_CHECKING:  # each protocol's client is imported when that protocol is used
    from ..client.mega import MegaClient
    from ..client.rsio import RsioClient
    from ..client.sbp import SbpClient

    AnyClient = MegaClient | RsioClient | SbpClient

#: messages a MEGA produce has in flight at once (each answered once durable)
MEGA_PIPELINE = 100
#: offsets a MEGA consume asks for at once
MEGA_RUN = 64
#: how often a MEGA consume asks again for an offset not stored yet
MEGA_POLL_S = 0.2
#: record batches per SBP APPEND frame
SBP_BATCHES = 1000
#: generated messages handed over at a time; an RSIO publish takes this many lines at most
STEP = 10000
#: seconds an interrupted produce waits for the answer to what it sent
CONFIRM_WAIT_S = 5.0
#: seconds an SBP listener has to answer the PING sent first, an RSIO one its Hello
PING_S = 10.0
#: an SBP consume's long poll, when no --timeout bounds it
SBP_WAIT_MS = 5000

@functools.cache
def mega_reasons() -> dict[int, str]:
    """MEGA's error codes in words (docs/protocols/mega.md: what streamlet answers them for)."""
    from ..mega import ErrorCode as Mega

    return {
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


@functools.cache
def sbp_reasons() -> dict[int, str | None]:
    """SBP's error codes in words; None: the broker's own message says it."""
    from ..sbp import ErrorCode as Sbp

    return {
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


def reason(stream: str, error: Exception) -> str:
    """A refusal in words, naming the stream (never its SBP id, nor only a code)."""
    from ..client.mega import MegaError

    if isinstance(error, MegaError):
        code = int(error.code)
        return f"{stream}: {mega_reasons().get(code, f'MEGA error {code}')}"
    sbp = sys.modules.get("streamlet.client.sbp")  # an SbpError comes with its module loaded
    if sbp is not None and isinstance(error, sbp.SbpError):
        words = sbp_reasons().get(error.code, f"SBP error {error.code}")
        return f"{stream}: {words or error.message or f'SBP error {error.code}'}"
    return f"{stream}: {error}"


async def run(args: argparse.Namespace) -> int:
    unsupported = [f"--{k}" for k in ("reference", "name") if getattr(args, k, None)]
    if unsupported:
        print(f"streamlet: {', '.join(unsupported)}: the RabbitMQ protocol's only",
              file=sys.stderr)
        return 2
    if args.command == "consume":
        if args.offset is None:
            args.offset = "first"  # no stored offset to resume from: these protocols have none
        if args.protocol != "rsio" and args.offset != "first" and not args.offset.isdigit():
            print(f"streamlet: {args.protocol.upper()} reads from an offset: --offset first or "
                  "a number", file=sys.stderr)
            return 2
    where = f"{args.host}:{args.port}"
    try:
        client = await _connect(args)
    except (OSError, TimeoutError) as e:
        print(f"streamlet: cannot connect to {where}: {e}", file=sys.stderr)
        return 1
    except NotAListener as e:
        print(f"streamlet: {_not_a_listener(where, args.protocol)}{e}", file=sys.stderr)
        return 1
    from ..client.mega import MegaError, NotMega  # small: their failures are told apart here

    try:
        async with client:
            if args.command == "produce":
                return await _produce(_sender(client, args), args)
            return await _consume(_records(client, args), args)
    except NotMega as e:
        print(f"streamlet: {_not_a_listener(where, 'mega')}: {e}", file=sys.stderr)
        return 1
    except (OSError, ConnectionError) as e:
        print(f"streamlet: the connection to {where} failed: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        if not isinstance(e, (MegaError, *_refusals(args.protocol))):
            raise
        print(f"streamlet: {reason(args.stream, e)}", file=sys.stderr)
        return 1


class NotAListener(Exception):
    """The port answered, but not as the protocol's listener does (the text: what it said)."""


async def _connect(args: argparse.Namespace) -> AnyClient:
    """A client of ``args.protocol`` (imported now), checked to answer as its listener."""
    if args.protocol == "mega":
        from ..client.mega import MegaClient

        return await MegaClient.connect(args.host, args.port)
    if args.protocol == "sbp":
        from ..client.sbp import SbpClient, SbpError

        sbp = await SbpClient.connect(args.host, args.port)
        try:  # SBP has no handshake: a PING tells an SBP listener from another port
            await asyncio.wait_for(sbp.ping(), PING_S)
        except (OSError, ConnectionError, TimeoutError, SbpError):
            await sbp.close()
            raise NotAListener("") from None
        return sbp
    from ..client.rsio import RsioClient, RsioError

    try:
        return await RsioClient.connect(args.host, args.port, timeout=PING_S)
    except RsioError as e:  # no Hello came back
        raise NotAListener(f": {e}") from None


def _refusals(protocol: str) -> tuple[type[Exception], ...]:
    """The exceptions by which ``protocol``'s client reports the broker's refusals."""
    if protocol == "sbp":
        from ..client.sbp import SbpError

        return (SbpError,)
    if protocol == "rsio":
        from ..client.rsio import RsioError

        return (RsioError,)
    return ()


def _not_a_listener(where: str, protocol: str) -> str:
    return (f"{where} does not answer as a{'n' if protocol in ('rsio', 'sbp') else ''} "
            f"{protocol.upper()} listener (the broker's --{protocol}-port)")


# --- produce -------------------------------------------------------------------------------

Send = Callable[[list[bytes]], Awaitable[None]]


def _sender(client: AnyClient, args: argparse.Namespace) -> Send:
    """How a batch of messages is sent and awaited until the broker has them durably (the
    stream made first with --create)."""
    created = not args.create

    async def send(batch: list[bytes]) -> None:
        nonlocal created
        if not created:
            created = True
            await _create(client, args.stream)
        if args.protocol == "mega":
            for i in range(0, len(batch), MEGA_PIPELINE):
                await cast("MegaClient", client).produce_many(args.stream,
                                                              batch[i : i + MEGA_PIPELINE])
        elif args.protocol == "sbp":
            for i in range(0, len(batch), SBP_BATCHES):  # an APPEND frame each, a batch a line
                await cast("SbpClient", client).append(args.stream, batch[i : i + SBP_BATCHES])
        else:
            await cast("RsioClient", client).publish(args.stream, batch, create=args.create)

    return send


async def _create(client: AnyClient, stream: str) -> None:
    """--create: the stream made unless it exists (RSIO's publish makes it itself)."""
    from ..client.mega import MegaClient, MegaError

    if isinstance(client, MegaClient):
        from ..mega import ErrorCode as Mega

        try:
            await client.create_topic(stream)
        except MegaError as e:
            if e.code != Mega.TOPIC_ALREADY_EXISTS:
                raise
        return
    sbp = sys.modules.get("streamlet.client.sbp")
    if sbp is not None and isinstance(client, sbp.SbpClient):
        from ..sbp import ErrorCode as Sbp

        try:
            await client.create_stream(stream)
        except sbp.SbpError as e:
            if e.code != Sbp.STREAM_EXISTS:
                raise


async def _inputs(args: argparse.Namespace) -> AsyncIterator[list[bytes]]:
    """--count generated messages, or standard input's lines, in batches."""
    if args.count is None:
        async for lines in line_batches():
            for i in range(0, len(lines), STEP):
                yield lines[i : i + STEP]
        return
    body, left = b"x" * args.size, args.count
    while left:
        n = min(left, STEP)
        yield [body] * n
        left -= n


async def _produce(send: Send, args: argparse.Namespace) -> int:
    sent = confirmed = 0
    pending: asyncio.Task[None] | None = None
    try:
        async for batch in _inputs(args):
            pending = asyncio.ensure_future(send(batch))
            sent += len(batch)
            await asyncio.shield(pending)
            confirmed += len(batch)
            pending = None
    except asyncio.CancelledError as e:
        stop.caught(e)
        if pending is not None:  # what was sent may still be answered
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(pending, CONFIRM_WAIT_S)
                confirmed += sent - confirmed
        print(f"streamlet: interrupted: {confirmed} of {messages(sent)} sent to {args.stream} "
              "confirmed", file=sys.stderr)
        return stop.exit_code
    print(f"published {messages(confirmed)} to {args.stream}", file=sys.stderr)
    return 0


# --- consume -------------------------------------------------------------------------------

Record = tuple[int | None, bytes]


def _records(client: AnyClient, args: argparse.Namespace) -> AsyncIterator[list[Record]]:
    if args.protocol == "mega":
        return _mega_records(cast("MegaClient", client), args.stream, int(_start(args.offset)))
    if args.protocol == "sbp":
        wait_ms = SBP_WAIT_MS if args.timeout is None else max(int(args.timeout * 1000), 1)
        return _sbp_records(cast("SbpClient", client), args.stream, int(_start(args.offset)),
                            min(wait_ms, SBP_WAIT_MS))
    demand = min(args.count, 512) if args.count else 512
    return _rsio_records(cast("RsioClient", client), args.stream, _start(args.offset), demand)


def _start(offset: str) -> int | str:
    if offset.isdigit():
        return int(offset)
    return 0 if offset == "first" else offset


async def _mega_records(c: MegaClient, stream: str, offset: int) -> AsyncIterator[list[Record]]:
    from ..client.mega import MegaError
    from ..mega import ErrorCode as Mega

    while True:
        try:
            got = await c.consume_run(stream, offset, MEGA_RUN)
        except MegaError as e:
            if e.code != Mega.INVALID_OFFSET:
                raise
            await asyncio.sleep(MEGA_POLL_S)  # not stored yet: MEGA has no wait
            continue
        yield [(offset + i, body) for i, (_, body) in enumerate(got)]
        offset += len(got)


async def _sbp_records(c: SbpClient, stream: str, offset: int,
                       wait_ms: int) -> AsyncIterator[list[Record]]:
    while True:
        got = await c.fetch(stream, offset, max_wait_ms=wait_ms, min_bytes=1)
        if got:  # else a long poll that ended empty: ask again
            yield [(at, body) for at, body in got]
            offset = got[-1][0] + 1


async def _rsio_records(c: RsioClient, stream: str, offset: int | str,
                        demand: int) -> AsyncIterator[list[Record]]:
    sub = await c.subscribe(stream, offset=offset, demand=demand)
    async for elements in sub.batches():
        yield [(e.offset, e.body) for e in elements]


def _lines(records: list[Record]) -> Iterator[bytes]:
    for offset, body in records:
        yield b"%s\t%s\n" % (b"" if offset is None else b"%d" % offset,
                             body.decode("utf-8", "replace").encode())


async def _consume(records: AsyncIterator[list[Record]], args: argparse.Namespace) -> int:
    out, seen, why = Output(), 0, ""
    gone = asyncio.ensure_future(until_reader_gone())  # `consume S | head -2` on a quiet stream
    try:
        while args.count is None or seen < args.count:
            try:
                got = await next_while_read(records, gone, args.timeout)
            except (TimeoutError, StopAsyncIteration):
                break  # --timeout passed without a message, or the end
            if args.count is not None:
                got = got[: args.count - seen]
            out.write(b"".join(_lines(got)))
            out.flush()
            seen += len(got)
    except OutputClosed:
        why = " (output closed)"
    except asyncio.CancelledError as e:
        stop.caught(e)
        why = " (interrupted)"
    finally:
        gone.cancel()
    print(f"consumed {messages(seen)} from {args.stream}{why}", file=sys.stderr)
    return stop.exit_code if stop.requested else 0
