"""Frames of the RabbitMQ Stream protocol for the fuzzer: valid commands with plausible and
odd arguments, and mutations of them (the generic ones of :mod:`.mutate` plus random command
keys and versions, which only this protocol's header has)."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from streamlet.rabbitmq import frames as f

from .mutate import LENGTH_PREFIXED, Mutator
from .peer import Peer

# Names the fuzz may create, delete, publish to: a small pool, so the streams it creates stay
# bounded, and none that the bystander or the other phases use ("soak-" prefix).
STREAMS = ["fuzz-0", "fuzz-1", "fuzz-2", ""]
SUPERS = ["fuzzsuper-0", "fuzzsuper-1"]
REFS = ["fuzz-ref", "", "x" * 255]
ARGS = [{}, {"max-age": "1h"}, {"max-length-bytes": "1000000"}, {"max-age": "forever"},
        {"stream-max-segment-size-bytes": "100000"}, {"stream-filter-size-bytes": "300"},
        {"no-such-argument": "1"}, {"queue-leader-locator": "client-local"}]

Template = Callable[[random.Random, int], f.Command]


def _body(rng: random.Random) -> bytes:
    return rng.randbytes(rng.choice([0, 1, 10, 100, 1000]))


def _publish(rng: random.Random, corr: int) -> f.Command:
    first = rng.choice([0, 1, corr, 2**63, 2**64 - 1 - 10])
    v2 = rng.random() < 0.3
    msgs = [f.PublishedMessage.simple(first + i, _body(rng), rng.choice([None, "a", "b"]) if v2 else None)
            for i in range(rng.randint(1, 10))]
    return f.Publish(rng.randint(0, 3), msgs, version=2 if v2 else 1)


def _subscribe(rng: random.Random, corr: int) -> f.Command:
    otype = rng.randint(1, 5)
    props = rng.choice([{}, {"filter.0": "a"}, {"single-active-consumer": "true", "name": "g"},
                        {"match-unfiltered": "true"}])
    return f.Subscribe(corr, rng.randint(0, 3), rng.choice(STREAMS), otype,
                       rng.choice([0, 1, 2**40]) if otype in (4, 5) else 0, rng.randint(0, 20), props)


#: After Open: every command a client sends, and a few only a server sends.
OPEN_TEMPLATES: list[Template] = [
    lambda r, c: f.DeclarePublisher(c, r.randint(0, 3), r.choice([None, *REFS]), r.choice(STREAMS)),
    _publish, _publish, _publish,
    lambda r, c: f.QueryPublisherSequence(c, r.choice(REFS), r.choice(STREAMS)),
    lambda r, c: f.DeletePublisher(c, r.randint(0, 3)),
    _subscribe, _subscribe,
    lambda r, c: f.Credit(r.randint(0, 3), r.choice([0, 1, 100, 0xFFFF])),
    lambda r, c: f.StoreOffset(r.choice(REFS), r.choice(STREAMS), r.choice([0, 5, 2**64 - 1])),
    lambda r, c: f.QueryOffset(c, r.choice(REFS), r.choice(STREAMS)),
    lambda r, c: f.Unsubscribe(c, r.randint(0, 3)),
    lambda r, c: f.Create(c, r.choice(STREAMS), r.choice(ARGS)),
    lambda r, c: f.Delete(c, r.choice(STREAMS)),
    lambda r, c: f.Metadata(c, r.sample(STREAMS, r.randint(0, len(STREAMS)))),
    lambda r, c: f.StreamStats(c, r.choice(STREAMS)),
    lambda r, c: f.ResolveOffsetSpec(c, r.choice(STREAMS), r.randint(1, 5), 0, {}),
    lambda r, c: f.Route(c, r.choice(["0", "1", ""]), r.choice(SUPERS)),
    lambda r, c: f.Partitions(c, r.choice(SUPERS)),
    lambda r, c: f.CreateSuperStream(c, s := r.choice(SUPERS), [f"{s}-{i}" for i in range(2)],
                                     ["0", "1"], r.choice(ARGS)),
    lambda r, c: f.DeleteSuperStream(c, r.choice(SUPERS)),
    lambda r, c: f.Heartbeat(),
    lambda r, c: f.ExchangeCommandVersions(c, [f.CommandVersion(k, 1, r.randint(1, 3)) for k in (2, 8)]),
    lambda r, c: f.ConsumerUpdateResponse(c, 1, r.choice([0, 1, 4]), 0),
    lambda r, c: f.PeerProperties(c, {"product": "again"}),
    lambda r, c: f.Tune(r.choice([0, 1, 1 << 20]), r.choice([0, 1, 60])),
    lambda r, c: f.Open(c, r.choice(["/", "nope"])),
    lambda r, c: f.PublishConfirm(1, [1, 2]),
    lambda r, c: f.MetadataUpdate(6, r.choice(STREAMS)),
]

#: Before Open: the handshake's commands with odd arguments.
HANDSHAKE_TEMPLATES: list[Template] = [
    lambda r, c: f.PeerProperties(c, r.choice([{}, {"product": "fuzz"}, {"x" * 300: "y"}])),
    lambda r, c: f.SaslHandshake(c),
    lambda r, c: f.SaslAuthenticate(c, r.choice(["PLAIN", "EXTERNAL", "AMQPLAIN", ""]),
                                    r.choice([b"\0guest\0guest", b"\0guest\0wrong", b"", None,
                                              r.randbytes(40)])),
    lambda r, c: f.Tune(r.choice([0, 1, 1 << 20, 0xFFFFFFFF]), r.choice([0, 1, 60])),
    lambda r, c: f.Open(c, r.choice(["/", "", "nope"])),
    lambda r, c: f.Heartbeat(),
    lambda r, c: f.Close(c, 1, "bye"),
]


def _handshake_prefix(corr: int) -> list[bytes]:
    """The handshake's frames sent blind, without waiting for answers."""
    return [f.encode(f.PeerProperties(corr, {"product": "fuzz"})), f.encode(f.SaslHandshake(corr + 1)),
            f.encode(f.SaslAuthenticate(corr + 2, "PLAIN", b"\0guest\0guest")),
            f.encode(f.Tune(1 << 20, 0)), f.encode(f.Open(corr + 3, "/"))]


def random_key(rng: random.Random, frame: bytes) -> bytes:
    """Another command key: a known one (the body then fits another layout), a response
    key, or any u16."""
    key = rng.choice([rng.randint(1, 31), rng.randint(1, 31) | 0x8000, rng.randint(0, 0xFFFF)])
    return frame[:4] + struct.pack(">H", key) + frame[6:]


def random_version(rng: random.Random, frame: bytes) -> bytes:
    return frame[:6] + struct.pack(">H", rng.choice([0, 2, 3, 0xFFFF])) + frame[8:]


MUTATORS: tuple[Mutator, ...] = (*LENGTH_PREFIXED, random_key, random_version)


class StreamFuzzer:
    """The RabbitMQ Stream protocol's part of the fuzzer (see :class:`.fuzz.ProtocolFuzzer`)."""

    name = "stream"

    async def handshake(self, peer: Peer) -> None:
        await peer.handshake(heartbeat=0, timeout=60)

    def session(self, rng: random.Random, opened: bool, count: int,
                mutation_rate: float) -> tuple[list[bytes], int]:
        """``count`` frames for one connection, and how many are mutated: valid ones from the
        templates, each mutated with probability ``mutation_rate``. Without a real handshake
        (``opened`` false) the session may start with part of one sent blind."""
        frames: list[bytes] = []
        mutated = 0
        corr = rng.randint(1, 1000)
        templates = OPEN_TEMPLATES
        if not opened:
            frames = _handshake_prefix(corr)[: rng.randint(0, 5)]
            templates = HANDSHAKE_TEMPLATES + OPEN_TEMPLATES[:8]
        while len(frames) < count:
            corr += 1
            frame = f.encode(rng.choice(templates)(rng, corr))
            if rng.random() < mutation_rate:
                frame = rng.choice(MUTATORS)(rng, frame)
                mutated += 1
            frames.append(frame)
        return frames[:count], mutated
