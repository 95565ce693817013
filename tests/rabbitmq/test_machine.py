"""The handshake table (streamlet.rabbitmq.machine), every pair, in memory: no socket, no loop."""

from __future__ import annotations

import itertools

import pytest

from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.machine import (
    OTHER,
    OUTCOMES,
    TRANSITIONS,
    Allow,
    Drop,
    InvalidOutcome,
    Outcome,
    Refuse,
    State,
    Step,
    after,
    step,
)

AUTHENTICATING, TUNING, TUNED, OPEN, CLOSED = (
    State.AUTHENTICATING, State.TUNING, State.TUNED, State.OPEN, State.CLOSED)
HANDSHAKE = (f.PeerProperties, f.SaslHandshake, f.SaslAuthenticate, f.Tune, f.Open)
#: Commands the table does not name: the client's usual ones, a response, a server-to-client one.
OTHERS = (f.Publish, f.DeclarePublisher, f.Create, f.Metadata, f.Credit, f.CloseResponse,
          f.ConsumerUpdateResponse, f.Deliver)

BEFORE_OPEN = Refuse(Code.ACCESS_REFUSED, "{} before Open")
AFTER_OPEN = Refuse(Code.UNKNOWN_FRAME, "{} after Open")
TUNE_EARLY = Refuse(Code.ACCESS_REFUSED, "Tune before authentication", answer=False)
OPEN_EARLY = Refuse(Code.ACCESS_REFUSED, "Open before authentication", answer=False)

#: The expected verdicts, written out apart from the module's table.
EXPECTED: list[tuple[State, type, Step]] = [
    (AUTHENTICATING, f.PeerProperties, Allow(AUTHENTICATING)),
    (AUTHENTICATING, f.SaslHandshake, Allow(AUTHENTICATING)),
    (AUTHENTICATING, f.SaslAuthenticate, Allow(AUTHENTICATING)),
    (AUTHENTICATING, f.Tune, TUNE_EARLY),
    (AUTHENTICATING, f.Open, OPEN_EARLY),
    (AUTHENTICATING, f.Close, Allow(AUTHENTICATING)),
    (AUTHENTICATING, f.Heartbeat, Allow(AUTHENTICATING)),
    *[(AUTHENTICATING, c, BEFORE_OPEN) for c in OTHERS],

    (TUNING, f.PeerProperties, Allow(TUNING)),
    (TUNING, f.SaslHandshake, Allow(TUNING)),
    (TUNING, f.SaslAuthenticate, Allow(TUNING)),
    (TUNING, f.Tune, Allow(TUNED)),
    (TUNING, f.Open, Allow(TUNING)),
    (TUNING, f.Close, Allow(TUNING)),
    (TUNING, f.Heartbeat, Allow(TUNING)),
    *[(TUNING, c, BEFORE_OPEN) for c in OTHERS],

    (TUNED, f.PeerProperties, Allow(TUNED)),
    (TUNED, f.SaslHandshake, Allow(TUNED)),
    (TUNED, f.SaslAuthenticate, Allow(TUNED)),
    (TUNED, f.Tune, Allow(TUNED)),
    (TUNED, f.Open, Allow(TUNED)),
    (TUNED, f.Close, Allow(TUNED)),
    (TUNED, f.Heartbeat, Allow(TUNED)),
    *[(TUNED, c, BEFORE_OPEN) for c in OTHERS],

    *[(OPEN, c, AFTER_OPEN) for c in HANDSHAKE],
    (OPEN, f.Close, Allow(OPEN)),
    (OPEN, f.Heartbeat, Allow(OPEN)),
    *[(OPEN, c, Allow(OPEN)) for c in OTHERS],

    *[(CLOSED, c, Drop()) for c in (*HANDSHAKE, f.Close, f.Heartbeat, *OTHERS)],
]


@pytest.mark.parametrize(("state", "command", "expected"), [
    pytest.param(s, c, e, id=f"{s.value}-{c.__name__}") for s, c, e in EXPECTED])
def test_verdict(state: State, command: type, expected: Step) -> None:
    assert step(state, command) == expected


def test_every_state_and_named_command_is_listed() -> None:
    named = {c for (_, c) in TRANSITIONS if c is not OTHER}
    listed = {(s, c) for s, c, _ in EXPECTED}
    assert {(s, c) for s, c in itertools.product(State, named)} <= listed
    assert all((s, OTHER) in TRANSITIONS for s in State)  # no state leaves a command unanswered


@pytest.mark.parametrize("state", list(State), ids=lambda s: s.value)
def test_refusals_name_the_command(state: State) -> None:
    for command in (*HANDSHAKE, *OTHERS):
        verdict = step(state, command)
        if isinstance(verdict, Refuse) and "{}" in verdict.reason:
            assert verdict.reason.format(command.__name__).startswith(command.__name__)


EXPECTED_OUTCOMES: list[tuple[State, Outcome, State | None]] = [
    (AUTHENTICATING, Outcome.AUTHENTICATED, TUNING),
    (TUNING, Outcome.AUTHENTICATED, TUNING),  # a second SaslAuthenticate: a fresh Tune is sent
    (TUNED, Outcome.AUTHENTICATED, TUNING),
    (OPEN, Outcome.AUTHENTICATED, None),
    (CLOSED, Outcome.AUTHENTICATED, None),
    (AUTHENTICATING, Outcome.OPENED, None),
    (TUNING, Outcome.OPENED, OPEN),  # Open without the Tune echo keeps the server's values
    (TUNED, Outcome.OPENED, OPEN),
    (OPEN, Outcome.OPENED, None),
    (CLOSED, Outcome.OPENED, None),
    *[(s, Outcome.CLOSED, CLOSED) for s in State],
]


@pytest.mark.parametrize(("state", "outcome", "expected"), [
    pytest.param(s, o, e, id=f"{s.value}-{o.value}") for s, o, e in EXPECTED_OUTCOMES])
def test_outcome(state: State, outcome: Outcome, expected: State | None) -> None:
    if expected is None:
        with pytest.raises(InvalidOutcome):
            after(state, outcome)
    else:
        assert after(state, outcome) is expected


def test_every_outcome_pair_is_listed() -> None:
    assert {(s, o) for s, o, _ in EXPECTED_OUTCOMES} == set(itertools.product(State, Outcome))
    assert set(OUTCOMES) == {(s, o) for s, o, e in EXPECTED_OUTCOMES if e is not None}


class Handshake:
    """A connection's use of the machine: ``step`` before the handler, ``after`` for its result."""

    def __init__(self) -> None:
        self.state = State.AUTHENTICATING

    def receive(self, command: type) -> Step:
        verdict = step(self.state, command)
        if isinstance(verdict, Allow):
            self.state = verdict.next
        elif isinstance(verdict, Refuse):
            self.state = after(self.state, Outcome.CLOSED)
        return verdict

    def outcome(self, outcome: Outcome) -> None:
        self.state = after(self.state, outcome)


def test_the_usual_handshake_opens() -> None:
    h = Handshake()
    h.receive(f.PeerProperties)
    h.receive(f.SaslHandshake)
    h.receive(f.SaslAuthenticate)  # a mechanism not offered: the client tries again
    h.receive(f.SaslAuthenticate)
    assert h.state is AUTHENTICATING
    h.outcome(Outcome.AUTHENTICATED)
    assert h.state is TUNING
    h.receive(f.Tune)
    assert h.state is TUNED
    h.receive(f.Open)
    h.outcome(Outcome.OPENED)
    assert h.state is OPEN
    assert h.receive(f.DeclarePublisher) == Allow(OPEN)
    assert h.receive(f.Tune) == AFTER_OPEN
    assert h.state is CLOSED
    assert h.receive(f.Heartbeat) == Drop()


def test_a_refused_open_leaves_the_connection_unopened() -> None:
    h = Handshake()
    h.outcome(Outcome.AUTHENTICATED)
    h.receive(f.Tune)
    h.receive(f.Open)  # the handler refuses the vhost and reports no outcome
    assert h.state is TUNED
    assert h.receive(f.Create) == BEFORE_OPEN
    assert h.state is CLOSED


def test_a_command_before_authentication_closes() -> None:
    h = Handshake()
    h.receive(f.PeerProperties)
    assert h.receive(f.Open) == OPEN_EARLY
    assert h.state is CLOSED
