"""A follower's link reads frames into one buffer (peer._FrameBuffer): whatever the reads'
sizes, every frame comes out whole and in order, a frame taken stays intact until the next is
asked for, and the socket is not read while a whole frame waits to be taken."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from streamlet.broker.replication import peer as peer_mod
from streamlet.broker.replication.peer import BufferedPeer, PeerError, _FrameBuffer


class _Transport:
    def __init__(self) -> None:
        self.paused = False
        self.aborted = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def abort(self) -> None:
        self.aborted = True


def _frames(rng: random.Random, n: int, big: int) -> list[bytes]:
    return [rng.randbytes(rng.choice((1, 7, 100, big, rng.randrange(1, big))))
            for _ in range(n)]


def _feed(proto: _FrameBuffer, data: bytes, rng: random.Random, max_read: int) -> int:
    """Up to ``max_read`` bytes of ``data`` into the protocol as one read; how many."""
    buf = proto.get_buffer(-1)
    assert len(buf) > 0
    n = min(len(buf), len(data), rng.randrange(1, max_read + 1))
    buf[:n] = data[:n]
    proto.buffer_updated(n)
    return n


@pytest.mark.parametrize("obey_pause", [True, False])
@pytest.mark.parametrize("seed", range(6))
async def test_frames_whole_and_in_order(monkeypatch: pytest.MonkeyPatch, seed: int,
                                         obey_pause: bool) -> None:
    """``obey_pause`` False: reads go on while a frame is out (as a transport slow to pause
    might), so the buffer must be replaced, not moved under it."""
    monkeypatch.setattr(peer_mod, "BUFFER_BYTES", 4096)  # small: growth
    monkeypatch.setattr(peer_mod, "_STEP", 1024)
    rng = random.Random(seed)
    frames = _frames(rng, 400, 3000 if seed % 2 else 20000)
    wire = b"".join(struct.pack(">I", len(x)) + x for x in frames)
    proto = _FrameBuffer()
    t = _Transport()
    proto.connection_made(t)  # type: ignore[arg-type]
    pos = 0
    got: list[bytes] = []
    held: list[tuple[int, memoryview]] = []
    while len(got) < len(frames):
        if pos < len(wire) and not (obey_pause and t.paused) and rng.random() < 0.7:
            pos += _feed(proto, wire[pos:], rng, 9000)
            continue
        if held:  # the frame out stayed intact through the reads since it was taken
            idx, v = held[-1]
            assert bytes(v) == frames[idx]
        view = proto.take()  # releases the frame out
        held.clear()
        if view is None:
            assert pos < len(wire) and not t.paused
            continue
        if obey_pause:  # one whole frame at most waits: none is left once it is taken
            assert proto.start == proto.parsed and not t.paused
        got.append(bytes(view))
        held.append((len(got) - 1, view))
    assert got == frames
    assert proto.take() is None and not t.paused


async def test_a_frame_past_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    proto = _FrameBuffer()
    t = _Transport()
    proto.connection_made(t)  # type: ignore[arg-type]
    buf = proto.get_buffer(-1)
    buf[:4] = struct.pack(">I", peer_mod.MAX_FRAME + 1)
    proto.buffer_updated(4)
    assert t.aborted
    with pytest.raises(PeerError):
        await BufferedPeer(proto).frame_view()


async def test_lost_connection_ends_the_wait() -> None:
    proto = _FrameBuffer()
    proto.connection_made(_Transport())  # type: ignore[arg-type]
    peer = BufferedPeer(proto)
    waiting = asyncio.ensure_future(peer.frame_view())
    await asyncio.sleep(0)
    proto.connection_lost(None)
    with pytest.raises(asyncio.IncompleteReadError):
        await waiting
