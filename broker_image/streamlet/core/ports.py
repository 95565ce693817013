"""The core's ports: what a stream tells the protocol connection that holds its publishers,
readers and watches. An adapter (the RabbitMQ Stream connection today) implements Session and
maps a Refusal to its own codes; the core never names an adapter or a wire code.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol


class Refusal(Enum):
    """Why a stream did not take a publish."""

    GONE = "the stream was deleted"
    MOVED = "the stream moved to another broker (sealed here)"
    WRITE_FAILED = "the write to disk failed"


class Session(Protocol):
    """One client connection, whatever its protocol. The stream arguments are ``Any``: the
    adapter's own methods name the core's Stream, which this module cannot import."""

    user: str | None
    #: the peer does not read what it is sent: deliveries wait for ``write_room``
    paused: bool
    closing: bool

    def abort(self) -> None: ...

    # publishers
    def confirmed(self, publisher_id: int, ids: list[bytes]) -> None:
        """``ids``: packed big-endian publishing ids, stored (or deduplicated)."""

    def rejected(self, publisher_id: int, ids: list[int], why: Refusal) -> None: ...

    def placed(self, publisher_id: int, first_id: int, offset: int) -> None:
        """For a publisher with ``wants_offsets``: the batch starting with publishing id
        ``first_id`` was written at ``offset`` (before its confirm, which may come later)."""

    # readers
    def write_room(self) -> int:
        """Bytes that may be delivered before the peer counts as not reading."""

    def deliver(self, reader_id: int, chunks: list[memoryview], committed: int) -> None:
        """Stored chunks (header + data, as on disk) for one reader, in order."""

    def activate(self, reader: Any, active: bool) -> None:
        """A single-active-consumer group made ``reader`` active (or asks it to step down)."""

    # watches
    def stream_gone(self, stream: Any) -> None: ...

    def stream_moved(self, stream: Any) -> None: ...


class Clock(Protocol):
    """Time and scheduling, injected: an asyncio loop is one (the broker's), a manual clock
    another (tests of coalescing without waiting)."""

    def time(self) -> float: ...

    def call_soon(self, callback: Callable[[], object]) -> object: ...

    def call_later(self, delay: float, callback: Callable[[], object]) -> object: ...


class Reader(Protocol):
    """A cursor a stream wakes when data is committed."""

    conn: Session

    def pump(self) -> None: ...
