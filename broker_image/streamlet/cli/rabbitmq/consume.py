"""`streamlet consume`: a stream's messages as 'offset<TAB>body' lines on standard output.

It reads on the broker it connected to when that one holds the stream (its leader or a
replica), else on a member Metadata names. A subscription lost with its broker (the connection
dropped, or the stream moved: STREAM_NOT_AVAILABLE) is taken up again on a member that answers
(the other members first, then --host/--port), at the offset after the last one printed, for up
to RESUME_S: through a leader's failover every message is printed once, in order. With --name
and no --offset it resumes after the offset stored under that name; the offset of the last
message written is stored when it ends, however it ends (--count, --timeout, a closed pipe,
SIGINT or SIGTERM)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from ...amqp import AmqpError, decode_message
from ...client import Client, Consumer, OffsetSpec, StreamletError
from ...rabbitmq import Code, OffsetType
from ..output import Output, OutputClosed, next_while_read, until_reader_gone
from ..stop import stop
from ..words import messages
from .hints import AmqpHint
from .session import Opener, opener_for, session, stream_of

Address = tuple[str, int]
#: how long a lost subscription is looked for on the stream's members before consume gives up
RESUME_S = 60.0
#: the pause between two rounds over the members
RETRY_S = 0.5


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


async def members(client: Client, stream: str) -> list[Address]:
    """The brokers holding ``stream`` as ``client``'s broker knows them: its leader (when it
    has one) first, then its replicas."""
    meta = await client.metadata([stream])
    entry = next((s for s in meta.streams if s.stream == stream), None)
    if entry is None or entry.code != Code.OK:
        return []
    where = {b.reference: (b.host, b.port) for b in meta.brokers}
    return [where[r] for r in (entry.leader, *entry.replicas) if r in where]


def resumable(e: BaseException) -> bool:
    """A subscription that ended with its broker or its stream's move, not by a refusal."""
    return isinstance(e, StreamletError) and e.code == Code.STREAM_NOT_AVAILABLE


def candidates(known: list[Address], lost: Address | None, given: Address) -> list[Address]:
    """Where to look for the stream after losing ``lost``: the other members known, then the
    address the command was given, then the lost one (it may be back), each once."""
    order = [a for a in known if a != lost] + [given] + ([lost] if lost is not None else [])
    return list(dict.fromkeys(order))


class Reader:
    """The broker consume reads on, and the move to another one when it is lost."""

    def __init__(self, client: Client, args: argparse.Namespace, opener: Opener | None) -> None:
        self.first = client  # the command's own connection, closed by the command
        self.client = client
        self.args = args
        self.opener = opener
        self.given: Address = (args.host, args.port)
        self.known: list[Address] = []
        self.address: Address = self.given

    async def place(self) -> None:
        """Read here when this broker holds the stream, else on a member it names."""
        self.known = await members(self.client, self.args.stream)
        if not self.known or self.opener is None or any(self.client.is_local(a)
                                                          for a in self.known):
            self.address = self._local() or self.given
            return
        for address in self.known:
            try:
                other = await self.opener(*address)
            except (OSError, TimeoutError, StreamletError):
                continue
            print(f"streamlet: {self.args.stream} is on {address[0]}:{address[1]}",
                  file=sys.stderr)
            self.client, self.address = other, address
            return
        raise StreamletError(Code.STREAM_NOT_AVAILABLE,
                             f"no member of {self.args.stream} answers "
                             f"({', '.join(f'{h}:{p}' for h, p in self.known)})")

    def _local(self) -> Address | None:
        props = self.client.connection_properties
        host, port = props.get("advertised_host"), props.get("advertised_port")
        return (host, int(port)) if host and port and port.isdigit() else None

    async def resume(self, offset: OffsetSpec, why: BaseException) -> Consumer:
        """A new subscription at ``offset`` on a member that answers, within RESUME_S; raises
        ``why`` when none does."""
        lost = self.address
        await self._drop()
        print(f"streamlet: lost {lost[0]}:{lost[1]} ({why}); looking for a member of "
              f"{self.args.stream} for up to {RESUME_S:.0f} s", file=sys.stderr)
        deadline = time.monotonic() + RESUME_S
        while time.monotonic() < deadline:
            for address in candidates(self.known, lost, self.given):
                consumer = await self._try(address, offset)
                if consumer is not None:
                    at = f" at offset {offset.value}" if offset.type == OffsetType.OFFSET else ""
                    print(f"streamlet: reading on from {address[0]}:{address[1]}{at}",
                          file=sys.stderr)
                    return consumer
            await asyncio.sleep(RETRY_S)
        raise why

    async def _try(self, address: Address, offset: OffsetSpec) -> Consumer | None:
        assert self.opener is not None
        try:
            client = await self.opener(*address)
        except (OSError, TimeoutError, StreamletError):
            return None
        try:
            named = await members(client, self.args.stream)
            if not any(client.is_local(a) for a in named):
                self.known = list(dict.fromkeys([*self.known, *named]))  # look there next
                raise StreamletError(Code.STREAM_NOT_AVAILABLE, "not a member")
            consumer = await client.consumer(self.args.stream, offset=offset, name=self.args.name)
        except (OSError, TimeoutError, StreamletError):
            await client.close()
            return None
        self.client, self.address, self.known = client, address, named
        return consumer

    async def _drop(self) -> None:
        if self.client is not self.first:
            await self.client.close()

    async def close(self) -> None:
        await self._drop()


async def run(args: argparse.Namespace) -> int:
    """On the broker given when it holds the stream, else on a member it names."""
    return await session(args, lambda client: _consume_on(client, args))


async def _consume_on(client: Client, args: argparse.Namespace) -> int:
    args.stream = await stream_of(client, args)
    return await consume(client, args, opener_for(args))


async def consume(client: Client, args: argparse.Namespace, opener: Opener | None = None) -> int:
    """Print the stream's messages; ``opener`` lets it read on another broker (the stream's
    member, or another one after losing this one); without, it reads on ``client`` only."""
    reader = Reader(client, args, opener)
    try:
        await reader.place()
        return await _consume(reader, args)
    finally:
        await reader.close()


async def _consume(reader: Reader, args: argparse.Namespace) -> int:
    spec, resumed = await start(reader.client, args)
    consumer = await reader.client.consumer(args.stream, offset=spec, name=args.name)
    out = Output()
    amqp = AmqpBodies() if args.format == "amqp" else None
    hint = AmqpHint() if amqp is None else None  # raw: say so once if they are AMQP
    seen, last, why = 0, None, ""
    gone = asyncio.ensure_future(until_reader_gone())  # `consume S | head -2` on a quiet stream
    try:
        chunks = aiter(consumer.chunks())
        while args.count is None or seen < args.count:
            try:
                _, records, first = await next_while_read(chunks, gone, args.timeout)
            except (TimeoutError, StopAsyncIteration):
                break
            except StreamletError as e:
                if reader.opener is None or not resumable(e):
                    raise
                consumer = await reader.resume(
                    spec if last is None else OffsetSpec.offset(last + 1), e)
                chunks = aiter(consumer.chunks())
                continue
            if args.count is not None:
                records = records[: args.count - seen]
            if amqp is not None:
                records = [amqp(first + i, bytes(r)) for i, r in enumerate(records)]
            elif hint is not None:
                hint.look(records)
            out.write(b"".join([line(first + i, r) for i, r in enumerate(records)]))
            out.flush()  # a chunk at a time: a pipe sees messages as they come
            seen += len(records)
            last = first + len(records) - 1
    except OutputClosed:
        why = " (output closed)"
    except asyncio.CancelledError as e:
        stop.caught(e)
        why = " (interrupted)"
    finally:
        gone.cancel()
    stored = ""
    if args.name and last is not None:
        try:
            await consumer.store_offset(last)
            stored = f", offset {last} stored for {args.name}"
        except StreamletError as e:  # interrupted while its broker was lost
            stored = f", offset {last} not stored for {args.name} ({e})"
    await consumer.close()
    print(f"consumed {messages(seen)} from {args.stream}{resumed}{stored}{why}", file=sys.stderr)
    return stop.exit_code if stop.requested else 0
