"""Hints for a name that is not what the command takes: a super stream given to `produce` or
`consume`, which take a stream (RabbitMQ keeps the two apart: a super stream is an exchange
over its partition streams, and a stream of the same name may exist beside it)."""

from __future__ import annotations

from ..client import Client, StreamletError
from ..protocol import Key

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
