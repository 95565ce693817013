"""A stream, as protocol adapters and replication use it (the facade over its parts): the log,
who holds it (publishers, readers, watches), publishing, the commit point, pull reads, stats.

Publishes from any connection coalesce into one chunk (``core/pending.py`` decides when it is
written). A confirm goes out only once the chunk is committed (``core/commit.py``): on a stream
with one copy, when its write returned (so a killed broker loses nothing it confirmed); on a
replicated stream's leader, when ``commit`` says a majority holds it. Readers (subscriptions,
pull reads, ``last`` and ``next``) see committed chunks only, so nothing they saw is ever
truncated. A sealed (moved) or deleted stream refuses publishes with a neutral ``Refusal``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import replace
from itertools import islice
from pathlib import Path

from ..storage import ChunkRef, LogConfig, StreamLog
from .batch import PublishBatch
from .commit import CommitPoint
from .filtering import chunk_bloom
from .pending import PendingChunk
from .ports import Clock, PublisherSession, Reader, Refusal, Watcher
from .ratelog import RepeatedError
from .settings import StreamSettings
from .stats import LatencyHistogram

log = logging.getLogger("streamlet.broker")

#: fsync "interval": the longest a written chunk stays unsynced (about: the timer's delay).
SYNC_INTERVAL_S = 1.0
#: stored offsets and sequences named in ``details`` (each), so that it fits in a frame
MAX_LISTED = 1000


class Publisher:
    __slots__ = ("id", "reference", "stream", "conn", "wants_offsets")

    def __init__(self, pid: int, reference: str | None, stream: Stream, conn: PublisherSession,
                 wants_offsets: bool = False) -> None:
        self.id = pid
        self.reference = reference
        self.stream = stream
        self.conn = conn
        #: told the offset each batch was written at (PublisherSession.placed): a protocol
        #: that answers a publish with its offset (MEGA)
        self.wants_offsets = wants_offsets


class Stream:
    def __init__(self, name: str, directory: Path, settings: StreamSettings, fsync: str,
                 clock: Clock, confirm_latency: LatencyHistogram | None = None) -> None:
        self.clock = clock  # time and scheduling: the broker's event loop, or a test's clock
        self.name = name
        self.directory = directory
        #: what the stream was made with (its Create arguments and the defaults then)
        self.settings = settings
        #: what it runs with: ``settings`` as a policy changes them (``retune``)
        self.effective = settings
        self.log = StreamLog(directory, LogConfig(
            max_segment_bytes=settings.max_segment_size_bytes,
            max_bytes=settings.max_length_bytes,
            max_age_ms=settings.max_age_ms,
            fsync=fsync,
            filter_size=settings.filter_size,
        ))
        self.publishers: set[Publisher] = set()
        self.subscriptions: set[Reader] = set()
        #: connections that asked Metadata about this stream: told when it goes away
        self.watchers: set[Watcher] = set()
        #: the commit point, the confirms and pull readers waiting for it
        self.commits = CommitPoint(self.log, confirm_latency if confirm_latency is not None
                                   else LatencyHistogram())
        #: publish-to-confirm per chunk: from the first publish the chunk took to its confirm
        self.confirm_latency = self.commits.latency
        #: the next chunk, gathering publishes
        self.pending = PendingChunk(clock, dict(self.log.writer_sequences), self.commits,
                                    self.flush)
        self.deleted = False
        #: moved to another broker (the stream directory names it): reads only, see seal()
        self.sealed = False
        #: refused writes (a full disk refuses every flush): logged once per 10 s at most
        self._write_errors = RepeatedError(log)
        #: fsync "interval": the log syncs on a write a second after its last sync; this timer
        #: syncs the tail written after that, so nothing confirmed stays unsynced much longer
        self._sync_interval = fsync == "interval"
        self._sync_due = False
        # Counters since this broker opened the stream, read by the broker's metrics when
        # scraped; each moves once per chunk (or per delivery), never per message.
        self.messages_in = 0  # records written by publishes
        self.bytes_in = 0  # their entries' bytes
        self.messages_out = 0  # records delivered to subscriptions
        self.bytes_out = 0  # bytes of the chunks delivered (headers included)

    # --- the parts' state, as adapters and replication read and set it ------------------------

    @property
    def commit_end(self) -> int:
        """Offsets below this are committed: readers see them, their publishers were confirmed."""
        return self.commits.end

    @commit_end.setter
    def commit_end(self, end: int) -> None:
        self.commits.end = end

    @property
    def awaits_commit(self) -> bool:
        """True on a replicated stream's leader: confirms wait for ``commit`` (a majority's
        acks) instead of the write. False: one copy, committed once written."""
        return self.commits.awaits

    @awaits_commit.setter
    def awaits_commit(self, awaits: bool) -> None:
        self.commits.awaits = awaits

    @property
    def sequences(self) -> dict[str, int]:
        """The last publishing id accepted per publisher reference, pending writes included."""
        return self.pending.sequences

    @sequences.setter
    def sequences(self, sequences: dict[str, int]) -> None:
        self.pending.sequences = sequences

    @property
    def confirmed(self) -> int:
        """Publishing ids confirmed since this broker opened the stream (duplicates included)."""
        return self.commits.confirmed

    # --- who holds the stream: the core keeps these sets, adapters attach and detach --------

    def reference_taken(self, reference: str) -> bool:
        """A publisher reference names one writer per stream at a time."""
        return any(p.reference == reference for p in self.publishers)

    def attach_publisher(self, publisher: Publisher) -> None:
        self.publishers.add(publisher)

    def detach_publisher(self, publisher: Publisher, confirm_first: bool = True) -> None:
        """What it published is written and confirmed first (unless its session is gone: then
        it is written on the stream's own time, and the confirm goes nowhere)."""
        if publisher in self.publishers:
            if confirm_first:
                self.flush()
            self.publishers.discard(publisher)

    def attach_reader(self, reader: Reader) -> None:
        self.subscriptions.add(reader)

    def detach_reader(self, reader: Reader) -> None:
        self.subscriptions.discard(reader)

    def watch(self, session: Watcher) -> None:
        """``session`` is told when the stream is gone or moves (stream_gone / stream_moved)."""
        self.watchers.add(session)

    def unwatch(self, session: Watcher) -> None:
        self.watchers.discard(session)

    def holders(self) -> set[Watcher]:
        """Every connection holding a publisher, a reader or a watch of the stream."""
        return {p.conn for p in self.publishers} | {s.conn for s in self.subscriptions} | self.watchers

    # --- publishing ---------------------------------------------------------------------------

    def publish(self, publisher: Publisher, batch: PublishBatch) -> None:
        if batch.count == 0:
            return
        if self.sealed or self.deleted:  # sealed: the operator's last copy would miss it
            publisher.conn.rejected(publisher.id, _unpack_ids([batch.ids]),
                                    Refusal.GONE if self.deleted else Refusal.MOVED)
            return
        self.pending.add(publisher, batch)

    def flush(self) -> None:
        """Write the pending chunk, then confirm it (or queue its confirms for the commit)."""
        chunk = self.pending.take()
        if chunk is None or self.deleted:
            return
        try:
            ref = self.log.append(chunk.data, chunk.entries, chunk.records,
                                  writer_sequences=chunk.refs or None,
                                  bloom=chunk_bloom(chunk.filter_values, self.settings.filter_size),
                                  simple=chunk.simple)
        except (OSError, ValueError) as e:
            self._write_errors.error("stream %s: write failed: %s", self.name, e)
            self.sequences.update({r: self.log.writer_sequences.get(r, 0) for r in chunk.refs})
            for (conn, pid), packed in chunk.confirms.items():
                conn.rejected(pid, _unpack_ids(packed), Refusal.WRITE_FAILED)
            return
        self._write_errors.resolved("stream %s: writes succeed again", self.name)
        self.messages_in += chunk.records
        self.bytes_in += ref.data_length
        # Where the chunk really went: a segment roll writes its snapshot chunk first.
        for publisher, first_id, position in chunk.placed:
            publisher.conn.placed(publisher.id, first_id, ref.chunk_id + position)
        self._written()
        self.commits.wake_written(self.log.next_offset)
        if self.commits.written(chunk.confirms, chunk.since):
            self._committed()

    def seal(self) -> set[Publisher]:
        """Stop taking publishes (the stream moved to another broker); what is pending was
        published before, so it is written and confirmed first. Returns the publishers, now
        dropped: their connections are told the stream is not available here."""
        self.flush()
        self.sealed = True
        publishers, self.publishers = self.publishers, set()
        return publishers

    # --- the commit point (replicated streams; one copy commits on write) ----------------------

    def commit(self, end: int) -> None:
        """Offsets below ``end`` are on a majority (the leader's commit rule) or the leader said
        so (a follower): confirm what waited for it and let readers see it. Never moves back."""
        if self.commits.advance(end):
            self._committed()

    def forget_unconfirmed(self) -> None:
        """No longer this stream's leader: what waited for a commit here will not get one (its
        publishers were told; they resend to the new leader, which deduplicates)."""
        self.commits.forget()

    def _committed(self) -> None:
        for sub in list(self.subscriptions):
            sub.pump()
        self.commits.wake(self.commits.end)

    @property
    def committed_chunk_id(self) -> int:
        """The last committed user chunk's id (-1: none), as Deliver v2 and StreamStats give it."""
        return self.commits.chunk_id

    def appended(self) -> None:
        """A follower's log took chunks its leader sent: wake this member's replication readers.
        Its other readers wait for the leader's ``commit``."""
        self._written()
        self.commits.wake_written(self.log.next_offset)

    def _written(self) -> None:
        if self._sync_interval and not self._sync_due:
            self._sync_due = True
            self.clock.call_later(SYNC_INTERVAL_S, self._sync)

    def _sync(self) -> None:
        self._sync_due = False
        if self.deleted or self.log.closed:
            return
        try:
            self.log.sync()
        except OSError as e:
            self._write_errors.error("stream %s: fsync failed: %s", self.name, e)

    # --- consumer offsets ----------------------------------------------------------------------

    def store_offset(self, reference: str, offset: int) -> None:
        self.flush()  # keep the log's order: tracking after the data it refers to
        self.log.store_offset(reference, offset)
        self._written()
        if not self.commits.awaits:
            self.commits.end = self.log.next_offset
        # a leader's followers take the tracking chunk too
        self.commits.wake_written(self.log.next_offset)

    def stats(self) -> dict[str, int]:
        self.flush()  # what was confirmed is counted
        lg = self.log
        return {
            "first_chunk_id": lg.first_chunk_id,
            "committed_chunk_id": self.committed_chunk_id,
            "last_chunk_id": lg.last_chunk_id,
            "sealed": int(self.sealed),
        }

    def retune(self, settings: StreamSettings) -> None:
        """Run with ``settings``' retention and segment size from now on (a policy's): a new
        segment takes the size, and retention is applied at once, so a smaller limit deletes
        the whole segments it no longer keeps (never the newest), nothing else."""
        if settings == self.effective:
            return
        self.effective = settings
        self.log.reconfigure(replace(self.log.config,
                                     max_segment_bytes=settings.max_segment_size_bytes,
                                     max_bytes=settings.max_length_bytes,
                                     max_age_ms=settings.max_age_ms))
        if not self.log.closed:
            self.log.apply_retention(int(self.clock.wall_time() * 1000))

    def details(self) -> dict[str, int]:
        """``stats()`` and what `streamlet streams info` shows besides (streamlet's own keys in
        StreamStats' map, which RabbitMQ's clients ignore): offsets, messages, bytes on disk,
        segments, retention, and ``offset:<name>`` / ``sequence:<reference>`` for each stored
        consumer offset and publisher sequence."""
        lg, settings = self.log, self.effective
        out = self.stats()
        out.update({
            "first_offset": lg.first_offset, "committed_offset": self.commit_end - 1,
            "messages": lg.user_record_count(), "size_bytes": lg.size_bytes,
            "segments": lg.segment_count,
            "max_segment_size_bytes": settings.max_segment_size_bytes,
        })
        if settings.max_age_ms is not None:
            out["max_age_ms"] = settings.max_age_ms
        if settings.max_length_bytes:
            out["max_length_bytes"] = settings.max_length_bytes
        for prefix, stored in (("offset", lg.offsets), ("sequence", lg.writer_sequences)):
            out[f"{prefix}s"] = len(stored)  # all of them; the first MAX_LISTED are named
            out.update({f"{prefix}:{ref}": v for ref, v in islice(stored.items(), MAX_LISTED)})
        return out

    def close(self) -> None:
        self.flush()
        self.log.close()

    # --- pull reads: request/response protocols and replication read without a subscription --

    def fetch(self, offset: int, max_bytes: int) -> list[tuple[ChunkRef, memoryview]]:
        """The committed chunks from the one holding ``offset`` (or the first after it), up to
        about ``max_bytes`` (always one whole chunk at least); [] when there is none yet."""
        end = self.commits.end
        if offset >= end:
            return []
        ref = self.log.find_chunk(offset)
        if ref is None:
            return []
        return [c for c in self.log.read_chunks(ref, max_bytes) if c[0].chunk_id < end]

    def when_stored(self, offset: int, callback: Callable[[], object]) -> None:
        """Call ``callback`` once data at ``offset`` or past it is committed, or the stream is
        deleted: at once if that is already so. A long poll is this plus fetch."""
        if self.deleted or offset < self.commits.end:
            callback()
        else:
            self.commits.wait(offset, callback)

    def when_written(self, offset: int, callback: Callable[[], object]) -> None:
        """As ``when_stored``, but on the write, before the commit: replication sends a
        leader's chunks to its followers as soon as they are written."""
        if self.deleted or offset < self.log.next_offset:
            callback()
        else:
            self.commits.wait_written(offset, callback)

    def mark_deleted(self) -> None:
        """Deleted: no more publishes, and pull readers are woken to find it gone."""
        self.deleted = True
        self.commits.wake(1 << 64)
        self.commits.wake_written(1 << 64)


def _unpack_ids(packed: list[bytes]) -> list[int]:
    raw = b"".join(packed)
    return list(struct.unpack(f">{len(raw) // 8}Q", raw))
