"""Fixtures shared by every test folder: real broker processes on loopback, test certificates."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.certs import make_certs


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start as many brokers as a test needs; each is stopped at the end."""
    started: list[BrokerProcess] = []

    def make(**kwargs: object) -> BrokerProcess:
        data = tmp_path / f"broker{len(started)}" / "data"
        data.parent.mkdir(parents=True, exist_ok=True)
        b = BrokerProcess(data, **kwargs)  # type: ignore[arg-type]
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """One broker for this test, with the default guest/guest user."""
    return broker_factory()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module (tests must use distinct stream names)."""
    root = tmp_path_factory.mktemp("shared-broker")
    b = BrokerProcess(root / "data").start()
    yield b
    b.stop()


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    """tests/support/certs.py's set in ``tmp_path/certs``: ca, server (CN localhost, for
    127.0.0.1) and client (CN app, a user of the TLS tests); skips without openssl."""
    return make_certs(tmp_path / "certs", clients={"client": "app"})
