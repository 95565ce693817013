"""Byte-level mutations of one length-prefixed frame (``size u32`` then the body), shared by
every protocol whose frames are framed that way. Each returns the bytes to send instead."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

Mutator = Callable[[random.Random, bytes], bytes]


def flip_bits(rng: random.Random, frame: bytes) -> bytes:
    """1-8 random bits anywhere, the size prefix included."""
    b = bytearray(frame)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def shorter_size(rng: random.Random, frame: bytes) -> bytes:
    """A size prefix below the body's length: what follows is read as the next frame."""
    body = frame[4:]
    return struct.pack(">I", rng.randint(0, max(0, len(body) - 1))) + body


def longer_size(rng: random.Random, frame: bytes) -> bytes:
    """A size prefix past the body: a little (the next frame is swallowed), a lot (a partial
    frame the broker must hold or refuse) or absurd (over every limit)."""
    body = frame[4:]
    size = rng.choice([len(body) + rng.randint(1, 64), rng.randint(8192, 16 << 20),
                       rng.randint(16 << 20, 0xFFFFFFFF)])
    return struct.pack(">I", size) + body


def cut_body(rng: random.Random, frame: bytes) -> bytes:
    """A consistent size, a body cut short (fields missing mid-way)."""
    body = frame[4 : 4 + rng.randint(0, max(0, len(frame) - 5))]
    return struct.pack(">I", len(body)) + body


def extend_body(rng: random.Random, frame: bytes) -> bytes:
    """A consistent size, random bytes after the last field."""
    body = frame[4:] + rng.randbytes(rng.randint(1, 32))
    return struct.pack(">I", len(body)) + body


def random_body(rng: random.Random, frame: bytes) -> bytes:
    """The frame's header (its first 4 body bytes: a key and version), random bytes after."""
    body = frame[4:8] + rng.randbytes(rng.choice([0, 1, 4, 16, rng.randint(0, 600)]))
    return struct.pack(">I", len(body)) + body


def garbage(rng: random.Random, frame: bytes) -> bytes:
    """No framing at all: random bytes (an HTTP request, a TLS hello, noise)."""
    return rng.choice([b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01\x02\x00\x01",
                       b"\0\0\0\0", rng.randbytes(rng.randint(1, 256))])


def big_partial(rng: random.Random, frame: bytes) -> bytes:
    """A big frame (256 KiB to 4 MiB announced) of which only 64-256 KiB is sent: what the
    broker buffers for a slow or lying peer, bounded per connection by the frame limit.
    Rare (3% of its turns, else a plain longer size): a million frames must not mean gigabytes."""
    if rng.random() > 0.03:
        return longer_size(rng, frame)
    body = frame[4:] + rng.randbytes(rng.randint(64, 256) * 1024)
    return struct.pack(">I", rng.randint(320 * 1024, 4 << 20)) + body


LENGTH_PREFIXED: tuple[Mutator, ...] = (
    flip_bits, flip_bits, shorter_size, longer_size, cut_body, extend_body, random_body, garbage,
    big_partial)
