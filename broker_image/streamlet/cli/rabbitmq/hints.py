"""Hints for what a newcomer may not know to ask for: a super stream given to `produce` or
`consume`, which take a stream (RabbitMQ keeps the two apart: a super stream is an exchange
over its partition streams, and a stream of the same name may exist beside it); and messages
printed raw that are AMQP 1.0 messages, as RabbitMQ's clients publish them, whose bodies
`consume --format amqp` prints (:class:`AmqpHint`: said once, on stderr)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ...amqp import AmqpError, decode_message
from ...client import Client, StreamletError
from ...rabbitmq import Key

#: after 0x00 0x53 (a described type, its descriptor a small ulong): AMQP 1.0's message
#: sections, 0x70 (header) to 0x78 (footer)
_SECTIONS = range(0x70, 0x79)
AMQP_HINT = ("streamlet: these messages are AMQP 1.0 messages (as RabbitMQ's clients publish "
             "them): --format amqp prints their bodies")

#: partitions named in a hint
SHOWN = 4


async def super_stream_hint(client: Client, command: str, name: str) -> str | None:
    """A line when ``name`` is no stream but a super stream is called so; else None."""
    if not client.supports(Key.PARTITIONS) or await client.stream_exists(name):
        return None
    try:
        partitions = await client.partitions(name)
    except StreamletError:  # no super stream of that name either
        return None
    return hint(command, name, partitions) if partitions else None


def hint(command: str, name: str, partitions: list[str]) -> str:
    """The line for super stream ``name`` given to ``command`` (pure)."""
    shown = ", ".join(partitions[:SHOWN]) + (", ..." if len(partitions) > SHOWN else "")
    if command == "produce":
        return (f"{name} is a super stream, not a stream: give --routing-key KEY (to publish "
                f"to the partition KEY routes to), or name one of its partitions: {shown}")
    return (f"{name} is a super stream, not a stream: name one of its partitions ({command} "
            f"reads one stream): {shown}")


def looks_like_amqp(body: bytes) -> bool:
    """True when ``body`` starts as an AMQP 1.0 message section does and decodes as one."""
    if len(body) < 3 or body[:2] != b"\x00\x53" or body[2] not in _SECTIONS:
        return False
    try:
        decode_message(body)
    except (AmqpError, ValueError, TypeError, IndexError):
        return False
    return True


class AmqpHint:
    """consume's raw output: when the first message printed looks like AMQP 1.0, say once that
    --format amqp prints the bodies (only the first is looked at: the check costs nothing
    after)."""

    def __init__(self) -> None:
        self.looked = False

    def look(self, records: Sequence[bytes | memoryview]) -> None:
        if self.looked or not records:
            return
        self.looked = True
        if looks_like_amqp(bytes(records[0])):
            print(AMQP_HINT, file=sys.stderr)
