"""streamlet.client against a real broker: handshake, stream administration, offsets."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from streamlet.client import Client, ConnectionClosed, StreamletError, connect
from streamlet.rabbitmq import Code, Key
from streamlet.rabbitmq.constants import NO_LEADER

pytestmark = pytest.mark.process


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_handshake_reports_server_and_tuning(shared_broker: Any) -> None:
    async with await connect(shared_broker.host, shared_broker.port, heartbeat=30,
                             frame_max=65536) as c:
        assert c.server_properties.get("product")
        assert c.server_properties.get("version")
        assert 0 < c.frame_max <= 65536
        assert 0 < c.heartbeat <= 30
        assert isinstance(c.connection_properties, dict)
        assert not c.closed
    assert c.closed


async def test_wrong_password_is_refused(shared_broker: Any) -> None:
    with pytest.raises(StreamletError) as e:
        await connect(shared_broker.host, shared_broker.port, password="not-the-password")
    assert e.value.code == Code.AUTHENTICATION_FAILURE


async def test_requests_after_close_raise(shared_broker: Any) -> None:
    c = await connect(shared_broker.host, shared_broker.port)
    await c.close()
    with pytest.raises(ConnectionClosed):
        await c.stream_exists("anything")


async def test_create_exists_delete(client: Client) -> None:
    name = _name("admin")
    assert not await client.stream_exists(name)
    args = {"max-length-bytes": "10000000"}
    await client.create_stream(name, args)
    assert await client.stream_exists(name)
    with pytest.raises(StreamletError) as e:
        await client.create_stream(name, args)
    assert e.value.code == Code.STREAM_ALREADY_EXISTS
    await client.create_stream(name, args, exists_ok=True)
    await client.delete_stream(name)
    assert not await client.stream_exists(name)
    with pytest.raises(StreamletError) as e:
        await client.delete_stream(name)
    assert e.value.code == Code.STREAM_DOES_NOT_EXIST
    await client.delete_stream(name, missing_ok=True)


async def test_metadata_of_present_and_missing_streams(client: Client, stream: str) -> None:
    missing = _name("missing")
    md = await client.metadata([stream, missing])
    by_name = {s.stream: s for s in md.streams}
    assert by_name[stream].code == Code.OK
    assert by_name[missing].code == Code.STREAM_DOES_NOT_EXIST
    assert by_name[missing].leader == NO_LEADER
    leaders = {b.reference: b for b in md.brokers}
    assert by_name[stream].leader in leaders
    assert leaders[by_name[stream].leader].port > 0


async def test_offsets_and_sequences_start_empty(client: Client, stream: str) -> None:
    assert await client.query_offset("nobody", stream) is None
    assert await client.query_publisher_sequence("nobody", stream) == 0


async def test_store_offset_then_query(client: Client, stream: str) -> None:
    # StoreOffset has no answer: poll until the server has applied it
    await client.store_offset("reader", stream, 42)
    for _ in range(100):
        if await client.query_offset("reader", stream) == 42:
            break
        await asyncio.sleep(0.05)
    assert await client.query_offset("reader", stream) == 42


async def test_stream_stats(client: Client, stream: str) -> None:
    if not client.supports(Key.STREAM_STATS):
        with pytest.raises(StreamletError) as e:
            await client.stream_stats(stream)
        assert e.value.code == Code.UNKNOWN_FRAME
        assert await client.stream_exists(stream)  # refused locally: the connection lives on
        return
    empty = await client.stream_stats(stream)
    assert empty["committed_chunk_id"] == -1
    producer = await client.producer(stream)
    await producer.send_many([b"a", b"b", b"c"])
    await producer.flush()
    stats = await client.stream_stats(stream)
    assert stats["first_chunk_id"] == 0
    assert stats["committed_chunk_id"] >= 0


async def test_super_stream_lifecycle(client: Client) -> None:
    if not client.supports(Key.CREATE_SUPER_STREAM):
        pytest.skip("the server has no CreateSuperStream")
    name = _name("super")
    parts = [f"{name}-{i}" for i in range(3)]
    await client.create_super_stream(name, parts, ["0", "1", "2"])
    try:
        assert sorted(await client.partitions(name)) == parts
        assert await client.route("1", name) == [parts[1]]
        assert await client.route("no-such-key", name) == []
        for p in parts:
            assert await client.stream_exists(p)
    finally:
        await client.delete_super_stream(name)
    for p in parts:
        assert not await client.stream_exists(p)


async def test_metadata_update_callback_on_delete(shared_broker: Any, stream: str) -> None:
    """The server tells holders of a publisher that the stream went away."""
    async with await connect(shared_broker.host, shared_broker.port) as watcher:
        seen: list[tuple[str, int]] = []
        got = asyncio.Event()

        def on_update(s: str, code: int) -> None:
            seen.append((s, code))
            got.set()

        watcher.on_metadata_update = [on_update]
        producer = await watcher.producer(stream)
        async with await connect(shared_broker.host, shared_broker.port) as admin:
            await admin.delete_stream(stream)
        await asyncio.wait_for(got.wait(), 10)
        assert seen[0] == (stream, Code.STREAM_NOT_AVAILABLE)
        assert producer.closed
        with pytest.raises(StreamletError) as e:
            await producer.send(b"late")
        assert e.value.code == Code.STREAM_NOT_AVAILABLE


async def test_resolve_offset(client: Client, stream: str) -> None:
    if not client.supports(Key.RESOLVE_OFFSET_SPEC):
        pytest.skip("the server has no ResolveOffsetSpec")
    producer = await client.producer(stream)
    await producer.send_many([b"a", b"b"])
    await producer.flush()
    await producer.send_many([b"c", b"d"])
    await producer.flush()
    assert await client.resolve_offset(stream, "first") == 0
    assert await client.resolve_offset(stream, 3) == 3
    assert await client.resolve_offset(stream, "next") == 4
