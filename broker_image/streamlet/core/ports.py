"""The core's ports: what a stream tells the protocol connections that hold its publishers,
readers and watches, and what the core is given (time, the process's descriptors).

A connection implements the roles it plays, no more: ``Watcher`` (every holder: the stream is
gone or moved), ``PublisherSession`` (confirms, refusals with a neutral ``Refusal``, offsets)
and ``ReaderSession`` (a subscription's deliveries and activation). The core asks for the role
it needs where it needs it, and never names an adapter or a wire code.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..storage import ChunkRef


class Refusal(Enum):
    """Why a stream did not take a publish."""

    GONE = "the stream was deleted"
    MOVED = "the stream moved to another broker (sealed here)"
    WRITE_FAILED = "the write to disk failed"


class Watcher(Protocol):
    """A connection that holds anything of a stream (a publisher, a reader, a watch): told when
    the stream is gone or moved. The stream arguments are ``Any``: the adapter's own methods
    name the core's Stream, which this module cannot import."""

    def stream_gone(self, stream: Any) -> None: ...

    def stream_moved(self, stream: Any) -> None: ...


class PublisherSession(Watcher, Protocol):
    """The connection of a publisher: told what was stored (or refused) and where."""

    def confirmed(self, publisher_id: int, ids: list[bytes]) -> None:
        """``ids``: packed big-endian publishing ids, stored (or deduplicated)."""

    def rejected(self, publisher_id: int, ids: list[int], why: Refusal) -> None: ...

    def placed(self, publisher_id: int, first_id: int, offset: int) -> None:
        """For a publisher with ``wants_offsets``: the batch starting with publishing id
        ``first_id`` was written at ``offset`` (before its confirm, which may come later)."""


class ReaderSession(Watcher, Protocol):
    """The connection of a subscription (the core's pushing reader): sent stored chunks while
    it has room, and told when its single-active-consumer group activates it."""

    #: the peer does not read what it is sent: deliveries wait for ``write_room``
    paused: bool
    closing: bool

    def write_room(self) -> int:
        """Bytes that may be delivered before the peer counts as not reading."""

    def deliver(self, reader_id: int, chunks: list[memoryview], committed: int) -> None:
        """Stored chunks (header + data, as on disk) for one reader, in order."""

    def deliver_file(self, reader_id: int, fd: int, chunks: list[ChunkRef], committed: int) -> None:
        """Stored chunks without a bloom filter for one reader, in order, all in the segment
        file ``fd`` (to use at once): each is the ``48 + data_length`` bytes from its ``pos``,
        header and data back to back, what ``deliver`` would be given."""

    def activate(self, reader: Any, active: bool) -> None:
        """A single-active-consumer group made ``reader`` active (or asks it to step down)."""


class Clock(Protocol):
    """Time and scheduling, injected: an asyncio loop is one (the broker's), a manual clock
    another (tests of coalescing without waiting)."""

    def time(self) -> float:
        """Monotonic seconds: coalescing and timers."""

    def wall_time(self) -> float:
        """Seconds since the epoch: what is stored (a stream's creation) and retention's age."""

    def call_soon(self, callback: Callable[[], object]) -> object: ...

    def call_later(self, delay: float, callback: Callable[[], object]) -> object: ...


class Reader(Protocol):
    """A cursor a stream wakes when data is committed."""

    @property
    def conn(self) -> Watcher:
        """The connection the reader sends to."""

    def pump(self) -> None: ...


class Descriptors(Protocol):
    """The process's file descriptors, as the broker reads them (the core reads no /proc)."""

    def descriptors(self) -> tuple[int, int] | None:
        """(open now, the soft limit); None when unknown or unlimited."""
