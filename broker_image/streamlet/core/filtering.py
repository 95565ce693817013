"""Stream filtering: a bloom filter per chunk, and the subscriptions' matchers.

Follows Osiris's design (osiris_bloom): a ``stream-filter-size-bytes`` filter (16-255 bytes),
two bits per filter value, bit 0 for "also entries without a filter value"; a chunk with no
filter values has no bloom section. A subscription with filter values receives a chunk when its
bloom may hold one of them, a chunk without a bloom only with ``match-unfiltered=true``; clients
filter again (blooms have false positives). The hash is streamlet's own (blake2b): blooms never
leave the broker. The layout: docs/protocol.md#subscribe-properties.
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
