"""Publishing to and reading from a real broker, synchronously, for the Spark tests."""

from __future__ import annotations

import asyncio

from streamlet.client import OffsetSpec, connect


def body(i: int) -> bytes:
    # varied sizes and every byte value, so a wrong cut or offset shows
    return b"m%07d-" % i + bytes((i + k) % 256 for k in range(i % 37))


def publish(port: int, stream: str, bodies: list[bytes], create: bool = True,
            batches: int = 1) -> None:
    """Publish ``bodies`` in ``batches`` flushes (each flush tends to end a chunk)."""
    async def main() -> None:
        client = await connect("127.0.0.1", port)
        try:
            if create:
                await client.create_stream(stream, exists_ok=True)
            producer = await client.producer(stream)
            step = max(1, -(-len(bodies) // batches))
            for i in range(0, len(bodies), step):
                await producer.send_many(bodies[i:i + step])
                await producer.flush()
            await producer.close()
        finally:
            await client.close()
    asyncio.run(main())


def read_all(port: int, stream: str) -> list[tuple[int, bytes]]:
    """Every (offset, body) in the stream, read with the client (up to its last user chunk:
    tracking chunks take offsets but are not sent)."""
    async def main() -> list[tuple[int, bytes]]:
        client = await connect("127.0.0.1", port)
        try:
            last = await client.resolve_offset(stream, OffsetSpec.last())
            end = await client.resolve_offset(stream, OffsetSpec.next())
            out: list[tuple[int, bytes]] = []
            if last >= end:
                return out
            consumer = await client.consumer(stream, offset="first", credit=10)
            async for header, records, first in consumer.chunks():
                out.extend(enumerate(records, first))
                if header.chunk_id >= last:
                    break
            await consumer.close()
            return out
        finally:
            await client.close()
    return asyncio.run(main())


def stored_offset(port: int, reference: str, stream: str) -> int | None:
    async def main() -> int | None:
        client = await connect("127.0.0.1", port)
        try:
            return await client.query_offset(reference, stream)
        finally:
            await client.close()
    return asyncio.run(main())


def create_super_stream(port: int, name: str, partitions: int) -> list[str]:
    """A super stream with partitions ``name-0``..., as RabbitMQ names them."""
    async def main() -> list[str]:
        client = await connect("127.0.0.1", port)
        try:
            names = [f"{name}-{i}" for i in range(partitions)]
            await client.create_super_stream(name, names, [str(i) for i in range(partitions)])
            return await client.partitions(name)
        finally:
            await client.close()
    return asyncio.run(main())


def stream_exists(port: int, stream: str) -> bool:
    async def main() -> bool:
        client = await connect("127.0.0.1", port)
        try:
            return await client.stream_exists(stream)
        finally:
            await client.close()
    return asyncio.run(main())
