"""`streamlet produce|consume --protocol NAME` for the protocols with hooks (the table in this
package: MEGA, RSIO, SBP), behaving as the RabbitMQ protocol's: consume prints
'offset<TAB>body' lines and ends with "consumed N messages from S" on stderr (" (output
closed)" when the reader of a pipe went away: exit 0); produce ends with "published N messages
to S"; SIGINT and SIGTERM end either with its summary and 130 or 143 (cli/stop.py). A refusal
names the stream and a reason in words (the protocol's ``reason``), not the protocol's code."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterator

from ..lines import line_batches
from ..output import Output, OutputClosed, next_while_read, until_reader_gone
from ..stop import stop
from ..words import messages
from . import Hooks, NotAListener, Record, Send, hooks

#: generated messages handed over at a time; an RSIO publish takes this many lines at most
STEP = 10000
#: seconds an interrupted produce waits for the answer to what it sent
CONFIRM_WAIT_S = 5.0


async def run(args: argparse.Namespace) -> int:
    unsupported = [f"--{k}" for k in ("reference", "name") if getattr(args, k, None)]
    if unsupported:
        print(f"streamlet: {', '.join(unsupported)}: the RabbitMQ protocol's only",
              file=sys.stderr)
        return 2
    protocol = hooks(args.protocol)
    if args.command == "consume":
        if args.offset is None:
            args.offset = "first"  # no stored offset to resume from: these protocols have none
        if not protocol.NAMED_OFFSETS and args.offset != "first" and not args.offset.isdigit():
            print(f"streamlet: {args.protocol.upper()} reads from an offset: --offset first or "
                  "a number", file=sys.stderr)
            return 2
    where = f"{args.host}:{args.port}"
    try:
        client = await protocol.connect(args.host, args.port)
    except (OSError, TimeoutError) as e:
        print(f"streamlet: cannot connect to {where}: {e}", file=sys.stderr)
        return 1
    except NotAListener as e:
        print(f"streamlet: {_not_a_listener(where, args.protocol)}{e}", file=sys.stderr)
        return 1
    try:
        async with client:
            if args.command == "produce":
                return await _produce(protocol.produce(client, args), args)
            return await _consume(protocol.consume(client, args), args)
    except protocol.NOT_LISTENER as e:
        print(f"streamlet: {_not_a_listener(where, args.protocol)}: {e}", file=sys.stderr)
        return 1
    except (OSError, ConnectionError) as e:
        print(f"streamlet: the connection to {where} failed: {e}", file=sys.stderr)
        return 1
    except protocol.REFUSALS as e:
        print(f"streamlet: {reason(args.stream, e, protocol)}", file=sys.stderr)
        return 1


def reason(stream: str, error: Exception, protocol: Hooks) -> str:
    """A refusal in words, naming the stream (never its SBP id, nor only a code)."""
    return f"{stream}: {protocol.reason(error)}"


def _not_a_listener(where: str, protocol: str) -> str:
    return (f"{where} does not answer as a{'n' if protocol in ('rsio', 'sbp') else ''} "
            f"{protocol.upper()} listener (the broker's --{protocol}-port)")


# --- produce -------------------------------------------------------------------------------

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
