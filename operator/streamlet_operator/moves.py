"""Moving a stream between broker pods: copy its messages, then the caller switches and deletes.

The copy goes through the protocol (subscribe on the old pod, publish on the new one), chunk by
chunk, until it has reached the old stream's last chunk. Offsets are kept when the old stream
still starts at offset 0 (nothing removed by retention). Messages published to the old pod
after the copy finished and before its stream is deleted are lost: for a lossless move, stop
producers first (they get MetadataUpdate when the old stream goes, and reconnect).
"""

from __future__ import annotations

from .brokers import BrokerSession


async def copy_stream(source: BrokerSession, target: BrokerSession, name: str) -> int:
    """Copy every message of ``name`` from ``source`` into the (new, empty) stream on ``target``;
    return how many were copied."""
    stats = await source.stream_stats(name)
    if stats.last_offset < 0:
        return 0
    copied = 0
    async with source.read(name) as chunks, target.write(name) as publish:
        async for chunk_id, records in chunks:
            if records:
                await publish(records)
                copied += len(records)
            if chunk_id >= stats.last_offset:
                # Caught up with the snapshot: done unless more arrived meanwhile.
                stats = await source.stream_stats(name)
                if chunk_id >= stats.last_offset:
                    break
    return copied
