"""The wire protocols of `produce` and `consume --protocol NAME`: one row each, its name, the
port the commands connect to by default, and the module (here, imported when the command runs)
whose hooks speak it. A further protocol is one row and one module of hooks (:class:`Hooks`);
RabbitMQ's row has none: its commands are cli/rabbitmq/'s own. Nothing here imports a client,
so that the parser can read the table."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from typing import Protocol as Interface


@dataclass(frozen=True)
class Protocol:
    name: str  #: what --protocol takes
    port: int  #: the port the commands connect to without --port
    hooks: str | None  #: the module of hooks in this package; None: the RabbitMQ commands


#: --protocol's choices, the first the default
PROTOCOLS = {p.name: p for p in (
    Protocol("rabbitmq", 5552, None),
    Protocol("mega", 5553, "mega"),
    Protocol("rsio", 5554, "rsio"),
    Protocol("sbp", 5555, "sbp"),
)}
DEFAULT = "rabbitmq"

#: seconds a listener has to answer what is sent first (SBP's PING, RSIO's Hello)
PING_S = 10.0

#: a batch of messages sent, returning once the broker has them durably (a produce hook's)
Send = Callable[[list[bytes]], Awaitable[None]]
#: a message read: its offset (None: the protocol does not say) and its body
Record = tuple[int | None, bytes]


class NotAListener(Exception):
    """The port answered, but not as the protocol's listener does (the text: what it said)."""


class Hooks(Interface):
    """What a protocol's module gives `produce` and `consume` (commands.py runs them)."""

    #: the exceptions by which its client reports the broker's refusals
    REFUSALS: tuple[type[Exception], ...]
    #: the exceptions by which its client finds, mid-session, that the port speaks another protocol
    NOT_LISTENER: tuple[type[Exception], ...]
    #: True when --offset may also be last, next or @timestamp (else first or a number)
    NAMED_OFFSETS: bool

    async def connect(self, host: str, port: int) -> Any:
        """A client, checked to answer as the protocol's listener (else NotAListener)."""

    def produce(self, client: Any, args: argparse.Namespace) -> Send:
        """How `produce` sends a batch (the stream made first with --create)."""

    def consume(self, client: Any, args: argparse.Namespace) -> AsyncIterator[list[Record]]:
        """The messages `consume` prints, in batches, from --offset on."""

    def reason(self, error: Exception) -> str:
        """A refusal in words (never only a code)."""


def hooks(name: str) -> Hooks:
    """Protocol ``name``'s hooks, its module imported now."""
    module = PROTOCOLS[name].hooks
    if module is None:
        raise ValueError(f"{name}: its commands are its own, not hooks")
    hooked: Hooks = importlib.import_module(f"{__name__}.{module}")  # type: ignore[assignment]
    return hooked


def start(offset: str) -> int | str:
    """Where consume starts: an offset (first is 0), or the name or @timestamp given."""
    if offset.isdigit():
        return int(offset)
    return 0 if offset == "first" else offset
