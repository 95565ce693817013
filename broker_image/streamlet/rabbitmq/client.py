"""The connection handshake of the RabbitMQ Stream protocol as a client does it. No I/O.

A :class:`ClientHandshake` is fed what the server sent and answers with what to send; whoever
owns the socket (asyncio streams, a blocking socket, a test's fake transport) reads and writes.
Order: PeerProperties, SaslHandshake, SaslAuthenticate (PLAIN or EXTERNAL), the server's Tune
answered by :func:`negotiate`'s values, Open. Anything else (an error code, an unexpected frame,
the server's Close) raises :class:`HandshakeFailed` and the state is ``FAILED``; a Heartbeat is
ignored. The table, state by state: docs/protocol.md#the-handshake-as-a-client-does-it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from . import Code
from . import frames as f

MECHANISMS: Final = ("PLAIN", "EXTERNAL")


class State(enum.Enum):
    START = "start"  # nothing sent yet
    PEER_PROPERTIES = "peer properties"
    SASL_HANDSHAKE = "sasl handshake"
    SASL_AUTHENTICATE = "sasl authenticate"
    TUNE = "tune"
    OPEN = "open"
    OPENED = "opened"
    FAILED = "failed"


#: state -> (what it waits for, the state once that arrived and was OK)
TRANSITIONS: Final[dict[State, tuple[type[f.Command], State]]] = {
    State.PEER_PROPERTIES: (f.PeerPropertiesResponse, State.SASL_HANDSHAKE),
    State.SASL_HANDSHAKE: (f.SaslHandshakeResponse, State.SASL_AUTHENTICATE),
    State.SASL_AUTHENTICATE: (f.SaslAuthenticateResponse, State.TUNE),
    State.TUNE: (f.Tune, State.OPEN),
    State.OPEN: (f.OpenResponse, State.OPENED),
}


def negotiate(server: int, ours: int) -> int:
    """A Tune value: 0 means "no limit" (no preference), else the smaller wins."""
    if server == 0 or ours == 0:
        return max(server, ours)
    return min(server, ours)


def plain_credentials(user: str, password: str) -> bytes:
    """SASL PLAIN: authzid (empty), NUL, authcid, NUL, password."""
    return b"\0" + user.encode() + b"\0" + password.encode()


def code_name(code: int) -> str:
    """``8`` -> ``"AUTHENTICATION_FAILURE (8)"``; an unknown number stays a number."""
    try:
        return f"{Code(code).name} ({code})"
    except ValueError:
        return str(code)


@dataclass(frozen=True, slots=True)
class Opened:
    """What the handshake agreed on."""

    frame_max: int  # negotiated, as sent in our Tune
    heartbeat: int  # negotiated, as sent in our Tune (0: none)
    server_properties: dict[str, str]  # from PeerPropertiesResponse
    connection_properties: dict[str, str]  # from OpenResponse (advertised_host, _port...)


class HandshakeFailed(Exception):
    """The handshake cannot go on. ``code``: the protocol's (the server's answer, its Close's,
    or UNKNOWN_FRAME for a frame out of place); ``state``: where it happened. ``answer``: what
    is still owed to the server (the CloseResponse to its Close), None otherwise."""

    def __init__(self, code: int, reason: str, state: State,
                 answer: f.Command | None = None) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.state = state
        self.answer = answer

    @property
    def closed_by_server(self) -> bool:
        return self.answer is not None


class HandshakeOver(Exception):
    """Fed after the end (``OPENED`` or ``FAILED``): a bug in the driver, not the server's fault."""


class ClientHandshake:
    """One connection's handshake, from the first PeerProperties to the OpenResponse.

    ``correlation``: the last correlation id used on the connection (requests count on from
    it); afterwards it is the last one the handshake used, for the driver to count on from."""

    def __init__(
        self, *, properties: dict[str, str], user: str = "guest", password: str = "guest",
        vhost: str = "/", mechanism: str = "PLAIN", frame_max: int = 0, heartbeat: int | None = 0,
        correlation: int = 0,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"SASL mechanism {mechanism!r}: only {', '.join(MECHANISMS)}")
        self.properties = properties
        self.user, self.password, self.vhost, self.mechanism = user, password, vhost, mechanism
        self.frame_max, self.heartbeat = frame_max, heartbeat
        self.correlation = correlation
        self.state = State.START
        self.opened: Opened | None = None
        self._server_properties: dict[str, str] = {}
        self._tuned = (0, 0)

    @property
    def waiting_for(self) -> str:
        """The name of the frame the state waits for ("" at the start and the end)."""
        row = TRANSITIONS.get(self.state)
        return row[0].__name__ if row else ""

    def start(self) -> list[f.Command]:
        """The first frame to send."""
        if self.state is not State.START:
            raise HandshakeOver(f"start() in state {self.state.value}")
        self.state = State.PEER_PROPERTIES
        return [f.PeerProperties(self._next(), dict(self.properties))]

    def receive_frame(self, frame: bytes | memoryview) -> list[f.Command]:
        """:meth:`receive` for one frame's bytes (without its size prefix)."""
        return self.receive(f.decode(frame))

    def receive(self, cmd: f.Command | f.FrameError) -> list[f.Command]:
        """What to send in answer to ``cmd``, in order (often nothing). Raises HandshakeFailed."""
        state = self.state
        if state not in TRANSITIONS:
            raise HandshakeOver(f"{_name(cmd)} received in state {state.value}")
        if isinstance(cmd, f.Heartbeat):
            return []
        expected, after = TRANSITIONS[state]
        if isinstance(cmd, f.Close):
            raise self._fail(cmd.code, f"closed by the server: {cmd.reason}",
                             f.CloseResponse(cmd.correlation_id, Code.OK))
        if isinstance(cmd, f.FrameError):
            raise self._fail(cmd.code, f"undecodable frame (key {cmd.key:#06x}) while waiting "
                                       f"for {expected.__name__}: {cmd.reason}")
        if type(cmd) is not expected:
            raise self._fail(Code.UNKNOWN_FRAME,
                             f"unexpected {_name(cmd)} while waiting for {expected.__name__}")
        corr = getattr(cmd, "correlation_id", None)
        if corr is not None and corr != self.correlation:
            raise self._fail(Code.UNKNOWN_FRAME, f"{_name(cmd)} for correlation id {corr}, "
                                                 f"not {self.correlation}")
        code = getattr(cmd, "code", Code.OK)
        if code != Code.OK:
            raise self._fail(code, self._refused(code))
        send = self._on(cmd)
        self.state = after
        return send

    # --- each state's answer -----------------------------------------------------------------

    def _on(self, cmd: f.Command) -> list[f.Command]:
        if isinstance(cmd, f.PeerPropertiesResponse):
            self._server_properties = dict(cmd.properties)
            return [f.SaslHandshake(self._next())]
        if isinstance(cmd, f.SaslHandshakeResponse):
            if self.mechanism not in cmd.mechanisms:
                raise self._fail(Code.SASL_MECHANISM_NOT_SUPPORTED,
                                 f"server offers {cmd.mechanisms}, not {self.mechanism}")
            data = (plain_credentials(self.user, self.password)
                    if self.mechanism == "PLAIN" else b"")
            return [f.SaslAuthenticate(self._next(), self.mechanism, data)]
        if isinstance(cmd, f.SaslAuthenticateResponse):
            return []
        if isinstance(cmd, f.Tune):
            heartbeat = 0 if self.heartbeat is None else negotiate(cmd.heartbeat, self.heartbeat)
            self._tuned = (negotiate(cmd.frame_max, self.frame_max), heartbeat)
            return [f.Tune(*self._tuned), f.Open(self._next(), self.vhost)]
        assert isinstance(cmd, f.OpenResponse)
        self.opened = Opened(*self._tuned, self._server_properties, dict(cmd.properties))
        return []

    def _refused(self, code: int) -> str:
        what = {State.PEER_PROPERTIES: "PeerProperties",
                State.SASL_HANDSHAKE: "SaslHandshake",
                State.SASL_AUTHENTICATE: (f"SaslAuthenticate (PLAIN, user {self.user!r})"
                                          if self.mechanism == "PLAIN"
                                          else "SaslAuthenticate (EXTERNAL)"),
                State.OPEN: f"Open of virtual host {self.vhost!r}"}[self.state]
        why = ""
        if self.state is State.SASL_AUTHENTICATE and code == Code.ACCESS_REFUSED:
            why = " (a streamlet broker answers it to a user at its connection limit)"
        return f"{what} refused: {code_name(code)}{why}"

    def _fail(self, code: int, reason: str, answer: f.Command | None = None) -> HandshakeFailed:
        error = HandshakeFailed(code, reason, self.state, answer)
        self.state = State.FAILED
        return error

    def _next(self) -> int:
        self.correlation = (self.correlation + 1) & 0xFFFFFFFF
        return self.correlation


def _name(cmd: f.Command | f.FrameError) -> str:
    return type(cmd).__name__
