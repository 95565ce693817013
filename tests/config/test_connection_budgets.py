"""The pure decisions behind connection budgets, idle deadlines, memory return after a storm
and HTTP bodies: tables, no sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamlet.broker.config.model import ConfigError, ListenerLimits
from streamlet.broker.http.messages import Request, Response, body_length
from streamlet.broker.memory import STORM_FREED, TRIM_INTERVAL_S, trim_due
from streamlet.broker.protocols import load
from streamlet.broker.transport import QUIET_CHECK_S, check_interval, idle_since, refusal


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load(path, data_dir=str(tmp_path / "data"))


@pytest.mark.parametrize(("text", "protocol", "limits"), [
    # defaults: a tenth of limits.max_connections each, the handshake deadline, 300 s idle
    ("", "mega", ListenerLimits("mega", 1000, 10, 300)),
    ("", "rsio", ListenerLimits("rsio", 1000, 10, 300)),
    ("", "sbp", ListenerLimits("sbp", 1000, 10, 300)),
    # RabbitMQ: no budget of its own, its deadlines are its handshake's and heartbeats'
    ("", "rabbitmq", ListenerLimits("rabbitmq", 0, 0, 0)),
    ("[listeners.rabbitmq]\nmax_connections = 50\n", "rabbitmq", ListenerLimits("rabbitmq", 50)),
    ("[limits]\nmax_connections = 25\n", "mega", ListenerLimits("mega", 2, 10, 300)),
    ("[limits]\nmax_connections = 5\n", "sbp", ListenerLimits("sbp", 1, 10, 300)),  # at least 1
    ("[limits]\nmax_connections = 0\n", "rsio", ListenerLimits("rsio", 0, 10, 300)),  # unlimited
    ("[server]\nhandshake_timeout = 3\n[listeners.mega]\nport = 5560\nmax_connections = 7\n"
     "idle_timeout = 0\n", "mega", ListenerLimits("mega", 7, 3, 0)),
    ("[listeners.sbp]\nport = 5560\nidle_timeout = 30\n", "sbp", ListenerLimits("sbp", 1000, 10, 30)),
    ("[listeners.sbp]\nport = 5560\nidle_timeout = 30\n", "mega", ListenerLimits("mega", 1000, 10, 300)),
])
def test_listener_limits(tmp_path: Path, text: str, protocol: str, limits: ListenerLimits) -> None:
    assert _load(tmp_path, text).listener_limits(protocol) == limits


@pytest.mark.parametrize(("text", "message"), [
    ("[listeners.mega]\nport = 5560\nmax_connections = -1\n", "listeners.mega.max_connections"),
    ("[listeners.rsio]\nport = 5560\nidle_timeout = 1.5\n", "listeners.rsio.idle_timeout"),
    ("[listeners.sbp]\nport = 5560\nidle_timeout = \"5m\"\n", "listeners.sbp.idle_timeout"),
    ("[listeners.rabbitmq]\nidle_timeout = 5\n", "takes only enabled and max_connections"),
])
def test_bad_budgets_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        _load(tmp_path, text)


@pytest.mark.parametrize(("open_total", "total_limit", "open_here", "budget", "refused"), [
    (0, 10, 0, 1, None),
    (9, 10, 0, 1, None),
    (10, 10, 0, 1, "limits.max_connections"),   # the broker is full
    (5, 10, 1, 1, "max_connections"),           # this protocol's budget is spent
    (5, 10, 3, 0, None),                        # no budget of its own
    (50_000, 0, 3, 0, None),                    # no limit at all
    (50_000, 0, 3, 3, "its listener's max_connections"),
])
def test_refusal(open_total: int, total_limit: int, open_here: int, budget: int,
                 refused: str | None) -> None:
    why = refusal(open_total, total_limit, open_here, budget)
    assert (why is None) if refused is None else (why is not None and refused in why)


@pytest.mark.parametrize(("idle", "interval"), [
    (0, QUIET_CHECK_S), (1, 0.25), (8, 2.0), (300, QUIET_CHECK_S), (60, QUIET_CHECK_S),
])
def test_check_interval(idle: float, interval: float) -> None:
    assert check_interval(idle) == interval


@pytest.mark.parametrize(("last_received", "last_busy", "since"), [
    (100.0, 0.0, 100.0), (100.0, 250.0, 250.0), (300.0, 250.0, 300.0),
])
def test_idle_since(last_received: float, last_busy: float, since: float) -> None:
    assert idle_since(last_received, last_busy) == since


@pytest.mark.parametrize(("freed", "since_last", "due"), [
    (0, 100.0, False),                          # nothing closed: nothing to give back
    (1, 0.5, False),
    (1, TRIM_INTERVAL_S, True),                 # the usual tick
    (STORM_FREED - 1, 2.0, False),
    (STORM_FREED, 0.0, True),                   # a storm: at once, not a tick later
    (10 * STORM_FREED, 1.0, True),
])
def test_trim_due(freed: int, since_last: float, due: bool) -> None:
    assert trim_due(freed, since_last) is due


def _request(**headers: str) -> Request:
    return Request("POST", ("api", "x"), headers=headers)


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, 0),
    ({"content-length": "0"}, 0),
    ({"content-length": "65536"}, 65536),
    ({"content-length": " 12 "}, 12),
    ({"content-length": "65537"}, "413"),
    ({"content-length": "99999999999999999999"}, "413"),
    ({"content-length": "-1"}, "400"),
    ({"content-length": "abc"}, "400"),
    ({"transfer-encoding": "chunked"}, "411"),
    ({"transfer-encoding": "chunked", "content-length": "5"}, "411"),
])
def test_body_length(headers: dict[str, str], expected: int | str) -> None:
    """A length to read, or (a string) the status that refuses the body."""
    got = body_length(_request(**headers), 65536)
    if isinstance(got, Response):
        assert str(got.status) == expected and got.body
    else:
        assert got == expected
