"""The client's handshake machine (streamlet.rabbitmq.client) alone: every frame in every state,
in memory: no socket, no loop."""

from __future__ import annotations

import pytest

from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.client import (
    TRANSITIONS,
    ClientHandshake,
    HandshakeFailed,
    HandshakeOver,
    Opened,
    State,
    code_name,
    negotiate,
)

PROPS = {"product": "test"}
SERVER = {"product": "streamlet", "version": "3.13.7"}
#: The good path, as (state before, what the server sends, what the client sends back).
GOOD: list[tuple[State, f.Command, list[f.Command]]] = [
    (State.PEER_PROPERTIES, f.PeerPropertiesResponse(1, Code.OK, SERVER), [f.SaslHandshake(2)]),
    (State.SASL_HANDSHAKE, f.SaslHandshakeResponse(2, Code.OK, ["PLAIN", "EXTERNAL"]),
     [f.SaslAuthenticate(3, "PLAIN", b"\0guest\0guest")]),
    (State.SASL_AUTHENTICATE, f.SaslAuthenticateResponse(3, Code.OK), []),
    (State.TUNE, f.Tune(65536, 20), [f.Tune(65536, 20), f.Open(4, "/")]),
    (State.OPEN, f.OpenResponse(4, Code.OK, {"advertised_host": "h", "advertised_port": "5552"}),
     []),
]
WAITING = [s for s, _, _ in GOOD]
#: What a server may send that no state waits for.
STRAYS: list[f.Command] = [
    f.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, "s"), f.CreateResponse(9, Code.OK),
    f.ExchangeCommandVersionsResponse(5, Code.OK, []), f.PublishConfirm(1, [1]),
]


def machine(**kwargs: object) -> ClientHandshake:
    args: dict[str, object] = {"properties": PROPS, "frame_max": 1048576, "heartbeat": 60}
    return ClientHandshake(**(args | kwargs))  # type: ignore[arg-type]


def at(state: State, **kwargs: object) -> ClientHandshake:
    """A machine driven along the good path until it waits in ``state``."""
    m = machine(**kwargs)
    m.start()
    for before, frame, _ in GOOD:
        if before is state:
            break
        m.receive(frame)
    assert m.state is state
    return m


def test_the_good_path() -> None:
    m = machine()
    assert m.state is State.START and m.waiting_for == ""
    assert m.start() == [f.PeerProperties(1, PROPS)]
    for before, frame, answer in GOOD:
        assert m.state is before
        assert m.waiting_for == type(frame).__name__
        assert m.receive(frame) == answer
    assert m.state is State.OPENED
    assert m.opened == Opened(65536, 20, SERVER, {"advertised_host": "h", "advertised_port": "5552"})
    assert m.correlation == 4


def test_the_table_is_the_good_path() -> None:
    assert [(s, type(frame)) for s, frame, _ in GOOD] == [(s, w) for s, (w, _) in TRANSITIONS.items()]
    assert [n for _, n in TRANSITIONS.values()] == [*WAITING[1:], State.OPENED]


@pytest.mark.parametrize("state", WAITING, ids=lambda s: s.name)
@pytest.mark.parametrize("frame", [frame for _, frame, _ in GOOD] + STRAYS,
                         ids=lambda c: type(c).__name__)
def test_every_frame_in_every_state(state: State, frame: f.Command) -> None:
    m = at(state)
    expected, after = TRANSITIONS[state]
    if type(frame) is expected:
        m.receive(frame)
        assert m.state is after
        return
    with pytest.raises(HandshakeFailed) as e:
        m.receive(frame)
    assert (e.value.code, e.value.state, e.value.answer) == (Code.UNKNOWN_FRAME, state, None)
    assert str(e.value) == f"unexpected {type(frame).__name__} while waiting for {expected.__name__}"
    assert m.state is State.FAILED and m.opened is None


@pytest.mark.parametrize("state", WAITING, ids=lambda s: s.name)
def test_heartbeats_are_ignored_in_every_state(state: State) -> None:
    m = at(state)
    assert m.receive(f.Heartbeat()) == []
    assert m.state is state


@pytest.mark.parametrize("state", WAITING, ids=lambda s: s.name)
def test_a_close_from_the_server_fails_with_its_code_and_owes_a_close_response(state: State) -> None:
    m = at(state)
    with pytest.raises(HandshakeFailed) as e:
        m.receive(f.Close(7, Code.ACCESS_REFUSED, "handshake timeout"))
    assert e.value.code == Code.ACCESS_REFUSED and e.value.state is state
    assert str(e.value) == "closed by the server: handshake timeout"
    assert e.value.closed_by_server and e.value.answer == f.CloseResponse(7, Code.OK)
    assert m.state is State.FAILED


@pytest.mark.parametrize("state", WAITING, ids=lambda s: s.name)
def test_an_undecodable_frame_fails_with_its_code(state: State) -> None:
    m = at(state)
    with pytest.raises(HandshakeFailed) as e:
        m.receive_frame(b"\x7f\x00\x00\x01")  # an unknown key
    assert e.value.code == Code.UNKNOWN_FRAME and not e.value.closed_by_server
    assert str(e.value).startswith("undecodable frame (key 0x7f00) while waiting for ")
    assert m.state is State.FAILED


REFUSALS: list[tuple[State, f.Command, str]] = [
    (State.PEER_PROPERTIES, f.PeerPropertiesResponse(1, Code.ACCESS_REFUSED),
     "PeerProperties refused: ACCESS_REFUSED (16)"),
    (State.SASL_HANDSHAKE, f.SaslHandshakeResponse(2, Code.SASL_ERROR),
     "SaslHandshake refused: SASL_ERROR (9)"),
    (State.SASL_AUTHENTICATE, f.SaslAuthenticateResponse(3, Code.AUTHENTICATION_FAILURE),
     "SaslAuthenticate (PLAIN, user 'guest') refused: AUTHENTICATION_FAILURE (8)"),
    (State.SASL_AUTHENTICATE, f.SaslAuthenticateResponse(3, Code.ACCESS_REFUSED),
     "SaslAuthenticate (PLAIN, user 'guest') refused: ACCESS_REFUSED (16) (a streamlet broker "
     "answers it to a user at its connection limit)"),
    (State.SASL_AUTHENTICATE, f.SaslAuthenticateResponse(3, Code.SASL_CHALLENGE, b"more"),
     "SaslAuthenticate (PLAIN, user 'guest') refused: SASL_CHALLENGE (10)"),
    (State.OPEN, f.OpenResponse(4, Code.VIRTUAL_HOST_ACCESS_FAILURE),
     "Open of virtual host '/' refused: VIRTUAL_HOST_ACCESS_FAILURE (12)"),
]


@pytest.mark.parametrize(("state", "frame", "reason"), REFUSALS,
                         ids=lambda x: x.name if isinstance(x, State) else "")
def test_a_refusal_fails_with_the_servers_code(state: State, frame: f.Command, reason: str) -> None:
    m = at(state)
    with pytest.raises(HandshakeFailed) as e:
        m.receive(frame)
    assert (e.value.code, str(e.value), e.value.state) == (frame.code, reason, state)  # type: ignore[attr-defined]
    assert m.state is State.FAILED


def test_an_answer_to_another_request_fails() -> None:
    m = at(State.SASL_HANDSHAKE)
    with pytest.raises(HandshakeFailed) as e:
        m.receive(f.SaslHandshakeResponse(1, Code.OK, ["PLAIN"]))
    assert e.value.code == Code.UNKNOWN_FRAME
    assert str(e.value) == "SaslHandshakeResponse for correlation id 1, not 2"


def test_a_mechanism_the_server_does_not_offer_fails() -> None:
    m = at(State.SASL_HANDSHAKE)
    with pytest.raises(HandshakeFailed) as e:
        m.receive(f.SaslHandshakeResponse(2, Code.OK, ["AMQPLAIN"]))
    assert e.value.code == Code.SASL_MECHANISM_NOT_SUPPORTED
    assert str(e.value) == "server offers ['AMQPLAIN'], not PLAIN"


def test_external_sends_empty_data() -> None:
    m = at(State.SASL_HANDSHAKE, mechanism="EXTERNAL")
    assert m.receive(GOOD[1][1]) == [f.SaslAuthenticate(3, "EXTERNAL", b"")]
    with pytest.raises(HandshakeFailed, match=r"^SaslAuthenticate \(EXTERNAL\) refused"):
        m.receive(f.SaslAuthenticateResponse(3, Code.AUTHENTICATION_FAILURE))


def test_an_unknown_mechanism_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="AMQPLAIN"):
        machine(mechanism="AMQPLAIN")


def test_plain_credentials_and_vhost() -> None:
    m = at(State.SASL_HANDSHAKE, user="u", password="p\u00e9", vhost="/v")
    assert m.receive(GOOD[1][1]) == [f.SaslAuthenticate(3, "PLAIN", b"\0u\0p\xc3\xa9")]
    m.receive(GOOD[2][1])
    assert m.receive(f.Tune(0, 0))[1] == f.Open(4, "/v")


@pytest.mark.parametrize(("offered", "asked", "answered"), [
    ((1048576, 60), (0, 0), (1048576, 60)),  # no preference: the server's values (an echo)
    ((1048576, 60), (65536, 10), (65536, 10)),  # the smaller wins
    ((65536, 10), (1048576, 60), (65536, 10)),
    ((0, 0), (65536, 10), (65536, 10)),  # the server has no limit: ours
    ((0, 0), (0, 0), (0, 0)),
    ((1048576, 60), (0, None), (1048576, 0)),  # None: no heartbeats, whatever the server offers
    ((0, 0), (0, None), (0, 0)),
])
def test_tune_is_negotiated(offered: tuple[int, int], asked: tuple[int, int | None],
                            answered: tuple[int, int]) -> None:
    m = at(State.TUNE, frame_max=asked[0], heartbeat=asked[1])
    assert m.receive(f.Tune(*offered))[0] == f.Tune(*answered)
    m.receive(f.OpenResponse(4, Code.OK))
    assert m.opened is not None and (m.opened.frame_max, m.opened.heartbeat) == answered


def test_negotiate() -> None:
    assert negotiate(0, 60) == 60 and negotiate(30, 0) == 30 and negotiate(30, 60) == 30
    assert negotiate(0, 0) == 0


def test_correlation_ids_count_on_from_the_connections() -> None:
    m = machine(correlation=41)
    assert m.start() == [f.PeerProperties(42, PROPS)]
    assert m.receive(f.PeerPropertiesResponse(42, Code.OK)) == [f.SaslHandshake(43)]
    assert m.correlation == 43


def test_frames_as_bytes() -> None:
    m = machine()
    m.start()
    assert m.receive_frame(f.encode(GOOD[0][1])[4:]) == GOOD[0][2]


@pytest.mark.parametrize("end", ["opened", "failed"])
def test_feeding_after_the_end_is_a_driver_bug(end: str) -> None:
    m = at(State.OPEN)
    if end == "opened":
        m.receive(GOOD[-1][1])
    else:
        with pytest.raises(HandshakeFailed):
            m.receive(f.Tune(0, 0))
    with pytest.raises(HandshakeOver):
        m.receive(f.Heartbeat())
    with pytest.raises(HandshakeOver):
        m.start()


def test_code_name() -> None:
    assert code_name(8) == "AUTHENTICATION_FAILURE (8)"
    assert code_name(999) == "999"
