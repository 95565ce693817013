"""The fakes tests share, in one place: a manual clock for the core's Clock port, a session
that records what the core tells it (every session role of the core's ports), a transport that
records what a connection writes, and ``batch``, a core batch of simple entries for feeding a
stream (made as any adapter makes one, without a wire codec).

They stand in for the edges of the code under test only (time, the session adapter, the
socket); the code in the middle is the real one. A fake used by one test module stays in it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamlet.core.batch import PublishBatch
from streamlet.core.ports import Refusal


class ManualClock:
    """The core's Clock port by hand: time moves only when a test says so."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        #: the wall clock at ``now`` == 0: what streams stamp as their creation
        self.epoch = 1_700_000_000.0
        self._due: list[tuple[float, int, Callable[[], object]]] = []
        self._seq = 0

    def time(self) -> float:
        return self.now

    def wall_time(self) -> float:
        return self.epoch + self.now

    def call_soon(self, callback: Callable[[], object]) -> object:
        return self.call_later(0.0, callback)

    def call_later(self, delay: float, callback: Callable[[], object]) -> object:
        self._seq += 1
        self._due.append((self.now + delay, self._seq, callback))
        return None

    @property
    def pending(self) -> int:
        return len(self._due)

    def advance(self, seconds: float = 0.0) -> None:
        """Move time on and run what has come due, in order."""
        self.now += seconds
        while True:
            ready = sorted(d for d in self._due if d[0] <= self.now)
            if not ready:
                return
            self._due.remove(ready[0])
            ready[0][2]()


class FakeSession:
    """Plays every session role of streamlet.core.ports (Watcher, PublisherSession,
    ReaderSession) by recording."""

    def __init__(self) -> None:
        self.user: str | None = "test"
        self.paused = False
        self.closing = False
        self.confirms: list[int] = []
        self.rejects: list[tuple[int, Refusal]] = []
        self.moved: list[Any] = []
        self.room = 1 << 20
        self.delivered: list[tuple[int, int]] = []  # (reader id, chunks)
        self.activations: list[tuple[Any, bool]] = []
        self.placements: list[tuple[int, int]] = []  # (first publishing id, offset)

    def abort(self) -> None:
        self.closing = True

    def confirmed(self, publisher_id: int, ids: list[bytes]) -> None:
        for packed in ids:
            self.confirms += struct.unpack(f">{len(packed) // 8}Q", packed)

    def placed(self, publisher_id: int, first_id: int, offset: int) -> None:
        self.placements.append((first_id, offset))

    def rejected(self, publisher_id: int, ids: list[int], why: Refusal) -> None:
        self.rejects += [(i, why) for i in ids]

    def write_room(self) -> int:
        return self.room

    def deliver(self, reader_id: int, chunks: list[memoryview], committed: int) -> None:
        self.delivered.append((reader_id, len(chunks)))

    def deliver_file(self, reader_id: int, fd: int, chunks: list[Any], committed: int) -> None:
        self.delivered.append((reader_id, len(chunks)))

    def activate(self, reader: Any, active: bool) -> None:
        self.activations.append((reader, active))

    def stream_gone(self, stream: Any) -> None:
        pass

    def stream_moved(self, stream: Any) -> None:
        self.moved.append(stream)


def batch(first_id: int, bodies: list[bytes], publisher_id: int = 1) -> PublishBatch:
    """Messages ``first_id``, ``first_id + 1``, ... with these bodies, one simple entry each."""
    n = len(bodies)
    entries = b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    return PublishBatch(publisher_id, n, struct.pack(f">{n}Q", *range(first_id, first_id + n)),
                        entries, n, first_id, first_id + n - 1, True, None, True)


@dataclass
class FakeTransport:
    """What the connection writes, recorded; the rest of a transport's surface, inert."""

    written: bytearray = field(default_factory=bytearray)
    closed: bool = False
    reading: bool = True

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, buffers: list[bytes | memoryview]) -> None:
        for b in buffers:
            self.written += b

    def take(self) -> bytes:
        out, self.written = bytes(self.written), bytearray()
        return out

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default  # loopback: guest may log in

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
