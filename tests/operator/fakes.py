"""An in-memory broker admin, only for tests where no real broker process can run."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from streamlet_operator.brokers import Address, BrokerSession, BrokerUnavailable, StreamStats


class FakeBroker:
    def __init__(self) -> None:
        self.streams: dict[str, dict[str, str]] = {}
        self.super_streams: dict[str, list[str]] = {}


class _Session:
    def __init__(self, broker: FakeBroker) -> None:
        self.b = broker

    async def create_stream(self, name: str, arguments: dict[str, str]) -> bool:
        if name in self.b.streams:
            return False
        self.b.streams[name] = dict(arguments)
        return True

    async def create_super_stream(self, name: str, partitions: list[str],
                                  arguments: dict[str, str]) -> bool:
        if name in self.b.super_streams:
            return False
        self.b.super_streams[name] = list(partitions)
        for p in partitions:
            self.b.streams[p] = dict(arguments)
        return True

    async def delete_stream(self, name: str) -> bool:
        return self.b.streams.pop(name, None) is not None

    async def delete_super_stream(self, name: str, partitions: list[str]) -> bool:
        for p in self.b.super_streams.pop(name, []):
            self.b.streams.pop(p, None)
        return True

    async def stream_exists(self, name: str) -> bool:
        return name in self.b.streams

    async def stream_stats(self, name: str) -> StreamStats:
        return StreamStats(-1, -1, -1)


class FakeBrokerAdmin:
    def __init__(self) -> None:
        self.brokers: dict[Address, FakeBroker] = {}

    @contextlib.asynccontextmanager
    async def session(self, address: Address, user: str,
                      password: str) -> AsyncIterator[BrokerSession]:
        broker = self.brokers.get(address)
        if broker is None:
            raise BrokerUnavailable(f"nothing at {address}")
        yield _Session(broker)


class FakeProbe:
    """What a test asks a pod directly (as an admin would with a client)."""

    def __init__(self, admin: FakeBrokerAdmin) -> None:
        self.admin = admin

    async def exists(self, address: Address, name: str) -> bool:
        broker = self.admin.brokers.get(address)
        return broker is not None and name in broker.streams

    async def delete(self, address: Address, name: str) -> None:
        self.admin.brokers[address].streams.pop(name)
