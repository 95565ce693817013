"""The pending chunk: what gathers publishes into a stream's next chunk and writes it when
``packing.Packing`` says so.

``add`` deduplicates a batch against the last publishing id accepted per reference (pending
writes included) and appends what is new; the pending chunk is written at once when full
(another batch like the last would pass the packing's targets of entries and bytes; a batch
that does not fit is cut first), else when the packing's time bound comes (the next loop
turn for a stream without load). ``take`` hands the stream what to write and starts the
next chunk. Nothing here writes or confirms: the stream does.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Callable
from typing import NamedTuple, Protocol

from ..storage.entries import all_simple
from .batch import PublishBatch
from .commit import CommitPoint, Confirms
from .packing import Packing
from .ports import Clock, PublisherSession

#: the shortest wait a timer looking again is armed for (the broker's loop counts milliseconds)
_TIMER_S = 0.001


class Writer(Protocol):
    """A publisher as the pending chunk sees it (the stream's ``Publisher``)."""

    id: int
    reference: str | None
    conn: PublisherSession
    #: told the offset each batch was written at (PublisherSession.placed)
    wants_offsets: bool


class Chunk(NamedTuple):
    """A chunk to write, as ``take`` hands it over."""

    data: list[bytes | memoryview]  # the batches' entries as they came: no join
    entries: int
    records: int
    simple: bool  # every entry a simple one (ChunkRef.simple)
    confirms: Confirms
    #: the references' last publishing ids this chunk moves (its trailer)
    refs: dict[str, int]
    #: (publisher, first publishing id, record position) of batches whose publisher wants
    #: their offsets
    placed: list[tuple[Writer, int, int]]
    filter_values: set[str | None]  # for its bloom (None: an entry without one)
    since: float  # when it took its first publish (the latency histogram's clock)


class PendingChunk:
    def __init__(self, clock: Clock, sequences: dict[str, int], commits: CommitPoint,
                 write: Callable[[], None]) -> None:
        self.clock = clock
        #: last publishing id accepted per reference, pending writes included
        self.sequences = sequences
        self._commits = commits  # duplicates with nothing pending are confirmed there
        self._write = write  # the stream's flush: writes what ``take`` gives
        self._data: list[bytes | memoryview] = []
        self._count = 0
        self._records = 0
        self._bytes = 0
        self._simple = True
        self._confirms: Confirms = defaultdict(list)
        self._dirty_refs: dict[str, int] = {}
        self._placed: list[tuple[Writer, int, int]] = []
        self._filter_values: set[str | None] = set()
        self._scheduled = False
        self._generation = 0  # counts the chunks taken: a timer armed for an earlier one is void
        self._packing = Packing()  # the entry target and when a chunk not full is written
        self._since = 0.0  # when the pending chunk took its first publish (latency's clock)

    def add(self, publisher: Writer, batch: PublishBatch) -> None:
        """Take ``batch`` (not empty) into the pending chunk, writing full chunks on the way."""
        now = self.clock.time()
        packing = self._packing
        packing.published(now)
        rest: PublishBatch | None = batch
        while rest is not None:
            if not self._count:  # a new chunk: the latency histogram's clock and packing's
                self._since = self._commits.latency.now()
                packing.open(now)
            room, room_bytes = packing.target - self._count, packing.target_bytes - self._bytes
            if rest.count <= room and len(rest.data) <= room_bytes:
                part, rest = rest, None
            elif self._count:
                self._write_full()  # the pending chunk cannot take this batch: write it first
                continue
            else:
                part, rest = rest.cut(room, room_bytes)  # cut before deduplicating
            self._add(publisher, part)
            if self._count + part.count > packing.target \
                    or self._bytes + len(part.data) > packing.target_bytes:
                self._write_full()  # full: another batch like this one would not fit
        if self._count and not self._scheduled:
            self._scheduled = True
            self._arm(packing.due(self._count) - now)

    def _arm(self, wait: float) -> None:
        """Look at the pending chunk again in ``wait`` seconds (on the next loop turn if none)."""
        generation = self._generation

        def due() -> None:
            self._due(generation)

        if wait > 0:
            self.clock.call_later(wait, due)
        else:
            self.clock.call_soon(due)

    def _due(self, generation: int) -> None:
        """Write the pending chunk if the packing says it is time, else look again then."""
        if generation != self._generation:
            return  # the chunk it was armed for was taken (full, or flushed by the stream)
        if not self._count:
            self._scheduled = False
            return
        wait = self._packing.due(self._count) - self.clock.time()
        if wait > 0:  # publishes came since it was armed: the pause starts from the last
            self._arm(max(wait, _TIMER_S))
            return
        entries = self._count
        self._write()
        self._packing.written(entries)

    def _add(self, publisher: Writer, batch: PublishBatch) -> None:
        """Deduplicate ``batch`` and add what is new to the pending chunk."""
        ref = publisher.reference
        if ref is not None:
            last = self.sequences.get(ref, 0)
            if batch.first_id <= last or not batch.increasing:
                batch = self._deduplicate(publisher, batch, last)
                if batch.count == 0:
                    return
            self.sequences[ref] = self._dirty_refs[ref] = max(last, batch.last_id)
        if batch.filter_values is None:
            self._filter_values.add(None)
        else:
            self._filter_values.update(batch.filter_values)
        if publisher.wants_offsets:  # its place in the pending chunk, told once it is written
            self._placed.append((publisher, batch.first_id, self._records))
        if self._simple and not batch.simple:  # not known: a walk while the bytes are fresh
            self._simple = batch.simple is None \
                and all_simple((batch.data,), batch.count, batch.num_records)
        self._data.append(batch.data)
        self._count += batch.count
        self._records += batch.num_records
        self._bytes += len(batch.data)
        self._confirms[(publisher.conn, publisher.id)].append(batch.ids)

    def _write_full(self) -> None:
        """Write the pending chunk, which is full: the next one may hold twice as many."""
        self._write()
        self._packing.filled()

    def _deduplicate(self, publisher: Writer, batch: PublishBatch, last: int) -> PublishBatch:
        """Drop messages whose id is not above every id seen; confirm those at once."""
        kept: list[tuple[int, bytes, int]] = []
        kept_filters: list[str | None] = []
        dup: list[int] = []
        filters = batch.filter_values or [None] * batch.count
        for (pid, entry, records), fv in zip(batch.messages(), filters, strict=True):
            if pid > last:
                kept.append((pid, entry, records))
                kept_filters.append(fv)
                last = pid
            else:
                dup.append(pid)
        if dup:  # stored or pending: confirmed once what is pending now is, not stored again
            packed = struct.pack(f">{len(dup)}Q", *dup)
            if self._count:
                self._confirms[(publisher.conn, publisher.id)].append(packed)
            else:
                self._commits.duplicate((publisher.conn, publisher.id), packed)
        return _batch_of(batch.publisher_id, kept,
                         kept_filters if batch.filter_values is not None else None)

    def take(self) -> Chunk | None:
        """What is pending, as one chunk to write (None: nothing), and a new empty chunk."""
        self._scheduled = False
        self._generation += 1
        if not self._data:
            return None
        chunk = Chunk(self._data, self._count, self._records, self._simple, self._confirms,
                      self._dirty_refs, self._placed, self._filter_values, self._since)
        self._data, self._count, self._records, self._bytes = [], 0, 0, 0
        self._simple = True
        self._confirms, self._dirty_refs, self._placed = defaultdict(list), {}, []
        self._filter_values = set()
        return chunk


def _batch_of(publisher_id: int, msgs: list[tuple[int, bytes, int]],
              filters: list[str | None] | None) -> PublishBatch:
    ids = [m[0] for m in msgs]
    increasing = all(a < b for a, b in zip(ids, ids[1:], strict=False))
    return PublishBatch(
        publisher_id, len(msgs), struct.pack(f">{len(ids)}Q", *ids),
        b"".join(m[1] for m in msgs), sum(m[2] for m in msgs), ids[0] if ids else 0,
        ids[-1] if ids else 0, increasing, filters,
    )
