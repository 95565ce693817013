"""Logging in: the neutral name-and-password check with the loopback rule (broker/auth.py),
and RabbitMQ's SASL mechanisms over it (broker/rabbitmq/sasl.py), as tables."""

from __future__ import annotations

import pytest

from streamlet.broker.auth import Login, check, is_loopback
from streamlet.broker.config.model import User
from streamlet.broker.rabbitmq import sasl
from streamlet.rabbitmq import Code

USERS = (User("guest", "guest", loopback_only=True), User("app", "pw"))


@pytest.mark.parametrize(("name", "password", "peer", "login"), [
    ("guest", "guest", "127.0.0.1", Login.ACCEPTED),
    ("guest", "guest", "::1", Login.ACCEPTED),
    ("guest", "guest", None, Login.ACCEPTED),  # a Unix socket: local
    ("guest", "guest", "10.1.2.3", Login.LOOPBACK_ONLY),
    ("guest", "nope", "10.1.2.3", Login.REFUSED),  # the password first: nothing told
    ("app", "pw", "10.1.2.3", Login.ACCEPTED),
    ("app", "nope", "127.0.0.1", Login.REFUSED),
    ("nobody", "pw", "127.0.0.1", Login.REFUSED),
])
def test_check(name: str, password: str, peer: str | None, login: Login) -> None:
    assert check(USERS, name, password, peer) is login


def test_loopback() -> None:
    assert is_loopback("127.8.9.10") and not is_loopback("192.168.1.1") and not is_loopback("x")
    assert is_loopback("::ffff:127.0.0.1")  # an IPv4 peer as a dual-stack listener sees it


@pytest.mark.parametrize(("data", "peer", "answer"), [
    (b"\0guest\0guest", "127.0.0.1", (Code.OK, "guest")),
    (b"\0guest\0guest", "::1", (Code.OK, "guest")),
    (b"\0guest\0guest", "10.1.2.3", (Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK, None)),
    (b"\0app\0pw", "10.1.2.3", (Code.OK, "app")),
    (b"authz\0app\0pw", "10.1.2.3", (Code.OK, "app")),
    (b"\0app\0nope", "127.0.0.1", (Code.AUTHENTICATION_FAILURE, None)),
    (b"garbage", "127.0.0.1", (Code.SASL_ERROR, None)),
    (b"\0\xff\0pw", "127.0.0.1", (Code.SASL_ERROR, None)),
    (None, "127.0.0.1", (Code.SASL_ERROR, None)),
])
def test_plain(data: bytes | None, peer: str, answer: tuple[Code, str | None]) -> None:
    assert sasl.authenticate_plain(USERS, data, peer) == answer


@pytest.mark.parametrize(("common_name", "answer"), [
    ("app", (Code.OK, "app")),
    ("stranger", (Code.AUTHENTICATION_FAILURE, None)),
    (None, (Code.AUTHENTICATION_FAILURE, None)),  # no verified certificate
])
def test_external(common_name: str | None, answer: tuple[Code, str | None]) -> None:
    assert sasl.authenticate_external(USERS, common_name) == answer


def test_mechanisms() -> None:
    assert sasl.mechanisms(external=False) == ["PLAIN"]
    assert sasl.mechanisms(external=True) == ["PLAIN", "EXTERNAL"]
