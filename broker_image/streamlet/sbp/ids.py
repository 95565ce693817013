"""SBP's stream ids: a stream is named in every protocol (RabbitMQ, MEGA, RSIO) and SBP numbers
it with an int64. The id is a hash of the name, so every broker, every client and every restart
agrees on it with nothing stored: the first 8 bytes of SHA-256 of the UTF-8 name, big-endian,
the top bit cleared (ids are non-negative). Two names of one broker with the same id (about one
chance in 10**11 with 10,000 streams) make that id ambiguous: the broker answers it with
INVALID_REQUEST rather than pick one (docs/protocols/sbp.md)."""

from __future__ import annotations

import hashlib

_MASK = (1 << 63) - 1


def stream_id(name: str) -> int:
    """The SBP id of the stream called ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") & _MASK
