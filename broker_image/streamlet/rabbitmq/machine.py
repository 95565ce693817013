"""The connection handshake of the RabbitMQ Stream protocol as a state table. No I/O.

What may live here: states, the inputs that move between them, and the verdict on each pair.
Nothing that sends, reads, times or authenticates: the connection does that, asks ``step``
before it runs a command's handler, and reports what the handler decided with ``after``.
States: ``AUTHENTICATING``, ``TUNING``, ``TUNED``, ``OPEN``, ``CLOSED``; Close and Heartbeat
are accepted in every state before ``CLOSED``. The table, state by state, and how it differs
from RabbitMQ's reader: docs/protocol.md#the-handshake-state-by-state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from . import Code
from . import frames as f


class State(enum.Enum):
    AUTHENTICATING = "authenticating"
    TUNING = "tuning"
    TUNED = "tuned"
    OPEN = "open"
    CLOSED = "closed"


class Outcome(enum.Enum):
    """What a handler decided, fed back with ``after``."""

    AUTHENTICATED = "authenticated"  # a SaslAuthenticate succeeded (the server's Tune follows)
    OPENED = "opened"  # an Open was accepted
    CLOSED = "closed"  # the connection is closing, whatever the reason


class _Other:
    """The key for every command type the table does not name."""

    def __repr__(self) -> str:
        return "OTHER"


OTHER: Final = _Other()


@dataclass(frozen=True, slots=True)
class Allow:
    """Run the command's handler, in ``next`` state."""

    next: State


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse the command with ``code`` and close. ``answer``: first answer the request (when it
    has a correlation id) in its response layout. ``reason`` names the command as ``{}``."""

    code: Code
    reason: str
    answer: bool = True


@dataclass(frozen=True, slots=True)
class Drop:
    """Ignore the command: the connection is closing."""


Step = Allow | Refuse | Drop
Input = type | _Other

_BEFORE_OPEN = Refuse(Code.ACCESS_REFUSED, "{} before Open")
_AFTER_OPEN = Refuse(Code.UNKNOWN_FRAME, "{} after Open")
_DROP = Drop()

_S = State
#: (state, command type) -> what to do. OTHER stands for every command type not named in that
#: state's rows.
TRANSITIONS: Final[dict[tuple[State, Input], Step]] = {
    (_S.AUTHENTICATING, f.PeerProperties): Allow(_S.AUTHENTICATING),
    (_S.AUTHENTICATING, f.SaslHandshake): Allow(_S.AUTHENTICATING),
    (_S.AUTHENTICATING, f.SaslAuthenticate): Allow(_S.AUTHENTICATING),
    (_S.AUTHENTICATING, f.Tune): Refuse(Code.ACCESS_REFUSED, "Tune before authentication", False),
    (_S.AUTHENTICATING, f.Open): Refuse(Code.ACCESS_REFUSED, "Open before authentication", False),
    (_S.AUTHENTICATING, f.Close): Allow(_S.AUTHENTICATING),
    (_S.AUTHENTICATING, f.Heartbeat): Allow(_S.AUTHENTICATING),
    (_S.AUTHENTICATING, OTHER): _BEFORE_OPEN,

    (_S.TUNING, f.PeerProperties): Allow(_S.TUNING),
    (_S.TUNING, f.SaslHandshake): Allow(_S.TUNING),
    (_S.TUNING, f.SaslAuthenticate): Allow(_S.TUNING),
    (_S.TUNING, f.Tune): Allow(_S.TUNED),
    (_S.TUNING, f.Open): Allow(_S.TUNING),
    (_S.TUNING, f.Close): Allow(_S.TUNING),
    (_S.TUNING, f.Heartbeat): Allow(_S.TUNING),
    (_S.TUNING, OTHER): _BEFORE_OPEN,

    (_S.TUNED, f.PeerProperties): Allow(_S.TUNED),
    (_S.TUNED, f.SaslHandshake): Allow(_S.TUNED),
    (_S.TUNED, f.SaslAuthenticate): Allow(_S.TUNED),
    (_S.TUNED, f.Tune): Allow(_S.TUNED),
    (_S.TUNED, f.Open): Allow(_S.TUNED),
    (_S.TUNED, f.Close): Allow(_S.TUNED),
    (_S.TUNED, f.Heartbeat): Allow(_S.TUNED),
    (_S.TUNED, OTHER): _BEFORE_OPEN,

    (_S.OPEN, f.PeerProperties): _AFTER_OPEN,
    (_S.OPEN, f.SaslHandshake): _AFTER_OPEN,
    (_S.OPEN, f.SaslAuthenticate): _AFTER_OPEN,
    (_S.OPEN, f.Tune): _AFTER_OPEN,
    (_S.OPEN, f.Open): _AFTER_OPEN,
    (_S.OPEN, OTHER): Allow(_S.OPEN),

    (_S.CLOSED, OTHER): _DROP,
}

#: (state, outcome) -> the next state. A pair not here is a bug in the caller.
OUTCOMES: Final[dict[tuple[State, Outcome], State]] = {
    (_S.AUTHENTICATING, Outcome.AUTHENTICATED): _S.TUNING,
    (_S.TUNING, Outcome.AUTHENTICATED): _S.TUNING,
    (_S.TUNED, Outcome.AUTHENTICATED): _S.TUNING,
    (_S.TUNING, Outcome.OPENED): _S.OPEN,
    (_S.TUNED, Outcome.OPENED): _S.OPEN,
    **{(s, Outcome.CLOSED): _S.CLOSED for s in State},
}


class InvalidOutcome(Exception):
    """A handler reported an outcome its state cannot have (a bug, not a peer's fault)."""


def step(state: State, command: type) -> Step:
    """What to do with a command of type ``command`` received in ``state``."""
    found = TRANSITIONS.get((state, command))
    return found if found is not None else TRANSITIONS[state, OTHER]


def after(state: State, outcome: Outcome) -> State:
    """The state once a handler's ``outcome`` is known."""
    try:
        return OUTCOMES[state, outcome]
    except KeyError:
        raise InvalidOutcome(f"{outcome.value} in state {state.value}") from None
