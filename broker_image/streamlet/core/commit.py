"""A stream's commit point, and who waits for it.

Offsets below ``end`` are committed: readers see them, their publishers were confirmed. One
copy commits a chunk when its write returned (``written``); a replicated stream's leader
(``awaits``) keeps the chunk's confirms until replication's quorum rule calls ``advance``, as
a follower does when its leader says so. The commit point never moves back. Also here: pull
readers waiting for an offset to be committed (``wait``) or only written (``wait_written``:
replication's feeds), and the confirm counters the broker's metrics read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..storage import StreamLog
from .ports import PublisherSession
from .stats import LatencyHistogram

#: confirms to send, per (publisher's session, publisher id): packed publishing ids
Confirms = dict[tuple[PublisherSession, int], list[bytes]]


class CommitPoint:
    __slots__ = ("log", "end", "awaits", "confirmed", "latency", "_unconfirmed", "_waiting",
                 "_waiting_written")

    def __init__(self, log: StreamLog, latency: LatencyHistogram) -> None:
        self.log = log
        #: Offsets below this are committed.
        self.end = log.next_offset
        #: True on a replicated stream's leader: confirms wait for ``advance`` (a majority's
        #: acks) instead of the write. False: one copy, committed once written.
        self.awaits = False
        self.confirmed = 0  # publishing ids confirmed (duplicates included)
        #: publish-to-confirm per chunk: from the first publish the chunk took to its confirm
        self.latency = latency
        #: confirms waiting for the commit: (end offset of their chunk, confirms, when their
        #: chunk took its first publish (None: duplicates only)), in order
        self._unconfirmed: deque[tuple[int, Confirms, float | None]] = deque()
        #: pull readers waiting for data: (offset wanted, callback), woken by a commit
        self._waiting: list[tuple[int, Callable[[], object]]] = []
        #: replication's pull readers, woken by a write
        self._waiting_written: list[tuple[int, Callable[[], object]]] = []

    def written(self, confirms: Confirms, since: float) -> bool:
        """A chunk holding ``confirms``' publishes was written (the log ends after it): True if
        that committed it (its confirms sent), False if it waits for ``advance``."""
        if self.awaits:
            self._unconfirmed.append((self.log.next_offset, confirms, since))
            return False
        self.end = self.log.next_offset
        self.confirm(confirms, since)
        return True

    def duplicate(self, key: tuple[PublisherSession, int], packed: bytes) -> None:
        """Confirm duplicates (nothing pending) once everything written so far is committed:
        their original is among it (Osiris confirms a duplicate once its chunk commits)."""
        if self.end >= self.log.next_offset:
            self.confirm({key: [packed]}, None)
        else:
            self._unconfirmed.append((self.log.next_offset, {key: [packed]}, None))

    def confirm(self, confirms: Confirms, since: float | None) -> None:
        """Send ``confirms``; ``since``: when their chunk took its first publish (None:
        duplicates only, not a latency sample)."""
        n = 0
        for (conn, pid), packed in confirms.items():
            conn.confirmed(pid, packed)
            n += sum(map(len, packed))
        self.confirmed += n >> 3  # 8 bytes per publishing id
        if since is not None:
            self.latency.observe_since(since)

    def advance(self, end: int) -> bool:
        """Offsets below ``end`` are committed: confirm what waited for them. False (nothing
        done) when the commit point is there already."""
        if end <= self.end:
            return False
        self.end = end
        queue = self._unconfirmed
        while queue and queue[0][0] <= end:
            _, confirms, since = queue.popleft()
            self.confirm(confirms, since)
        return True

    def forget(self) -> None:
        """No longer the leader: what waited for a commit here will not get one."""
        self._unconfirmed.clear()

    @property
    def chunk_id(self) -> int:
        """The last committed user chunk's id (-1: none)."""
        lg = self.log
        if self.end >= lg.next_offset:
            return lg.last_chunk_id
        return lg.last_user_before(self.end)

    # --- pull readers ------------------------------------------------------------------------

    def wait(self, offset: int, callback: Callable[[], object]) -> None:
        """Call ``callback`` from ``wake`` once ``offset`` is committed."""
        self._waiting.append((offset, callback))

    def wait_written(self, offset: int, callback: Callable[[], object]) -> None:
        """Call ``callback`` from ``wake_written`` once ``offset`` is written."""
        self._waiting_written.append((offset, callback))

    def wake(self, up_to: int) -> None:
        """Call the pull readers whose offset is now below ``up_to``."""
        if not self._waiting:
            return
        due = [cb for off, cb in self._waiting if off < up_to]
        self._waiting = [(off, cb) for off, cb in self._waiting if off >= up_to]
        for cb in due:
            cb()

    def wake_written(self, up_to: int) -> None:
        """Call replication's pull readers whose offset is now below ``up_to``."""
        if not self._waiting_written:
            return
        due = [cb for off, cb in self._waiting_written if off < up_to]
        self._waiting_written = [(off, cb) for off, cb in self._waiting_written if off >= up_to]
        for cb in due:
            cb()
