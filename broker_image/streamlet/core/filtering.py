"""Stream filtering: a bloom filter per chunk, and the subscriptions' matchers.

Follows the design of Osiris (osiris_bloom): the filter is ``stream-filter-size-bytes`` bytes
(16-255); each filter value sets two bits, both in 1..bits-1; bit 0 says "this chunk also holds
entries without a filter value". A chunk with no filter values at all (or only entries without
one) has no bloom section. Bits are numbered from the most significant bit of byte 0.

A subscription with filter values (RabbitMQ's ``filter.N``: broker/rabbitmq/filtering.py) receives a
chunk when its bloom may hold one of them;
a chunk without a bloom only when it subscribed with ``match-unfiltered=true``. Bloom filters
have false positives, so clients filter messages again themselves (rstream, rbfly and the Java
client all do). The hash is streamlet's own (blake2b), not Erlang's phash2: blooms are never
sent to clients, so only this broker reads them.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..storage import StreamLog
    from ..storage.layout import ChunkRef

@lru_cache(maxsize=4096)
def _hash(value: str, bits: int) -> tuple[int, int]:
    d = hashlib.blake2b(value.encode(), digest_size=8).digest()
    return (int.from_bytes(d[:4], "big") % (bits - 1) + 1,
            int.from_bytes(d[4:], "big") % (bits - 1) + 1)


def _bit(bloom: bytes | bytearray, i: int) -> bool:
    return bool(bloom[i >> 3] & (0x80 >> (i & 7)))


def _set(bloom: bytearray, i: int) -> None:
    bloom[i >> 3] |= 0x80 >> (i & 7)


def chunk_bloom(values: set[str | None], size: int) -> bytes:
    """The bloom section of a chunk whose entries carried ``values`` (None or "" = an entry
    without a filter value); b"" when no entry had one."""
    if not values or (len(values) == 1 and (None in values or "" in values)):
        return b""  # the common cases first: no Publish v2, or v2 without values
    real = [v for v in values if v]
    if not real:
        return b""
    bloom = bytearray(size)
    bits = size * 8
    for v in real:
        h1, h2 = _hash(v, bits)
        _set(bloom, h1)
        _set(bloom, h2)
    if len(real) < len(values):
        _set(bloom, 0)  # the chunk also holds entries without a filter value
    return bytes(bloom)


class Matcher:
    """What a filtering subscription asked for; ``accepts`` decides per chunk."""

    __slots__ = ("values", "match_unfiltered")

    def __init__(self, values: list[str], match_unfiltered: bool) -> None:
        self.values = values
        self.match_unfiltered = match_unfiltered

    def matches(self, bloom: bytes) -> bool:
        if not bloom:
            return self.match_unfiltered
        if self.match_unfiltered and _bit(bloom, 0):
            return True
        bits = len(bloom) * 8
        for v in self.values:
            h1, h2 = _hash(v, bits)
            if _bit(bloom, h1) and _bit(bloom, h2):
                return True
        return False

    def accepts(self, log: StreamLog, ref: ChunkRef) -> bool:
        return self.matches(log.read_bloom(ref) if ref.bloom_size else b"")
