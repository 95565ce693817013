"""Client tests run against streamlet's broker (fixtures of tests/conftest.py).

Set STREAMLET_TEST_RABBITMQ=host:port to run the same tests against a RabbitMQ node instead
(a compatibility check of the client itself): tests that stop or kill the broker then skip.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from streamlet.client import Client, connect

_RABBITMQ = os.environ.get("STREAMLET_TEST_RABBITMQ", "")


@dataclass
class ExternalServer:
    """A server this test run did not start and must not stop."""

    host: str
    port: int

    def stop(self) -> None:
        pytest.skip("cannot stop an external server")

    kill = start = restart = stop


if _RABBITMQ:
    _host, _, _port = _RABBITMQ.rpartition(":")

    @pytest.fixture
    def broker() -> ExternalServer:
        return ExternalServer(_host or "127.0.0.1", int(_port))

    @pytest.fixture(scope="module")
    def shared_broker() -> ExternalServer:
        return ExternalServer(_host or "127.0.0.1", int(_port))


_names = itertools.count()


@pytest.fixture
async def client(shared_broker: Any) -> AsyncIterator[Client]:
    c = await connect(shared_broker.host, shared_broker.port, connection_name="tests")
    yield c
    await c.close()


@pytest.fixture
async def stream(client: Client) -> AsyncIterator[str]:
    """A fresh stream, deleted afterwards (names are unique so a shared server is fine)."""
    name = f"client-test-{uuid.uuid4().hex[:8]}-{next(_names)}"
    await client.create_stream(name)
    yield name
    if not client.closed:
        await client.delete_stream(name, missing_ok=True)
