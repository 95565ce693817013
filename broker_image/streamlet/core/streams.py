"""Streams: each owns its log, its publishers' deduplication state and its subscriptions.

Publishes from any connection coalesce into one chunk: ``publish`` queues and schedules the
flush for the next event-loop iteration, or, while publishes keep coming, for COALESCE_S after
the previous flush. A confirm goes out only once the chunk is committed: on a stream with one
copy, when its write returned (so a killed broker loses nothing it confirmed); on a replicated
stream's leader, when ``commit`` says a majority holds it. Readers (subscriptions, pull reads,
``last`` and ``next``) see committed chunks only, so nothing they saw is ever truncated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import shutil
import struct
import sys
import time
from collections import defaultdict, deque
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from urllib.parse import quote, unquote

from ..storage import ChunkRef, LogConfig, StreamLog
from ..storage.entries import all_simple
from ..storage.files import files
from .batch import PublishBatch
from .filtering import chunk_bloom
from .ports import Clock, Reader, Refusal, Session
from .ratelog import RepeatedError
from .settings import StreamSettings
from .stats import LatencyHistogram

log = logging.getLogger("streamlet.broker")

#: How many entries a chunk may hold: CHUNK_MIN_ENTRIES for the first chunk after a quiet spell
#: (no chunk written for QUIET_S), twice as many for each chunk that filled up since, at most
#: CHUNK_MAX_ENTRIES; and at most CHUNK_MAX_BYTES of entries (one bigger entry excepted). A
#: burst, even one Publish frame, is written as chunks that grow, so a consumer attaching at
#: ``last`` after it gets its tail, not a replay; under sustained load chunks are big, so
#: catch-up reads stay cheap. RabbitMQ's writer behaves alike: its batches start small and
#: double while messages keep coming (a 4,999-message frame: chunks of 32 .. 2,048, then 935).
CHUNK_MIN_ENTRIES = 256
CHUNK_MAX_ENTRIES = 16_384
CHUNK_MAX_BYTES = 4 << 20
QUIET_S = 0.01
#: Under load, a stream writes at most one chunk per this many seconds: publishes arriving in
#: between gather into it (bigger chunks, so fewer, cheaper deliveries, as RabbitMQ's writer
#: packs whatever is pending). A publish after a quiet spell is written at once.
COALESCE_S = 0.0005
#: fsync "interval": the longest a written chunk stays unsynced (about: the timer's delay).
SYNC_INTERVAL_S = 1.0


class Publisher:
    __slots__ = ("id", "reference", "stream", "conn", "wants_offsets")

    def __init__(self, pid: int, reference: str | None, stream: Stream, conn: Session,
                 wants_offsets: bool = False) -> None:
        self.id = pid
        self.reference = reference
        self.stream = stream
        self.conn = conn
        #: told the offset each batch was written at (Session.placed): a protocol that answers
        #: a publish with its offset (MEGA)
        self.wants_offsets = wants_offsets


#: stored offsets and sequences named in ``details`` (each), so that it fits in a frame
MAX_LISTED = 1000


class Stream:
    def __init__(self, name: str, directory: Path, settings: StreamSettings, fsync: str,
                 clock: Clock, confirm_latency: LatencyHistogram | None = None) -> None:
        self.clock = clock  # time and scheduling: the broker's event loop, or a test's clock
        self.name = name
        self.directory = directory
        self.settings = settings
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
        self.watchers: set[Session] = set()
        #: last publishing id accepted per reference, pending writes included
        self.sequences: dict[str, int] = dict(self.log.writer_sequences)
        #: pending publishes: entry blobs, message count, record count, bytes
        self._data: list[bytes | memoryview] = []
        self._count = 0
        self._records = 0
        self._bytes = 0
        self._simple = True  # the pending entries are all simple (ChunkRef.simple)
        #: packed publishing ids to confirm, per (connection, publisher id)
        self._confirms: dict[tuple[Session, int], list[bytes]] = defaultdict(list)
        self._dirty_refs: dict[str, int] = {}
        #: (publisher, first publishing id, record position) of pending batches whose publisher
        #: wants their offsets
        self._placed: list[tuple[Publisher, int, int]] = []
        #: filter values of the pending chunk (None: an entry without one), for its bloom
        self._filter_values: set[str | None] = set()
        self._scheduled = False
        self._last_flush = 0.0
        #: entries the pending chunk may hold (see CHUNK_MIN_ENTRIES)
        self._chunk_entries = CHUNK_MIN_ENTRIES
        self.deleted = False
        #: pull readers waiting for data: (offset wanted, callback), woken by flush or delete
        self._waiting: list[tuple[int, Callable[[], object]]] = []
        #: moved to another broker (the stream directory names it): reads only, see seal()
        self.sealed = False
        #: Offsets below this are committed: readers see them, their publishers were confirmed.
        self.commit_end = self.log.next_offset
        #: True on a replicated stream's leader: confirms wait for ``commit`` (a majority's
        #: acks) instead of the write. False: one copy, committed once written.
        self.awaits_commit = False
        #: confirms waiting for the commit: (end offset of their chunk, confirms), in order
        #: and when their chunk took its first publish (None: duplicates only)
        self._unconfirmed: deque[tuple[int, dict[tuple[Session, int], list[bytes]],
                                       float | None]] = deque()
        #: replication's pull readers, woken by a write (``_waiting`` wakes on commit)
        self._waiting_written: list[tuple[int, Callable[[], object]]] = []
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
        self.confirmed = 0  # publishing ids confirmed (duplicates included)
        self.messages_out = 0  # records delivered to subscriptions
        self.bytes_out = 0  # bytes of the chunks delivered (headers included)
        #: publish-to-confirm per chunk: from the first publish the chunk took to its confirm
        self.confirm_latency = confirm_latency if confirm_latency is not None else LatencyHistogram()
        self._pending_since = 0.0  # when the pending chunk took its first publish

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

    def watch(self, session: Session) -> None:
        """``session`` is told when the stream is gone or moves (stream_gone / stream_moved)."""
        self.watchers.add(session)

    def unwatch(self, session: Session) -> None:
        self.watchers.discard(session)

    # --- publishing ---------------------------------------------------------------------------

    def publish(self, publisher: Publisher, batch: PublishBatch) -> None:
        if batch.count == 0:
            return
        if self.sealed or self.deleted:  # sealed: the operator's last copy would miss it
            publisher.conn.rejected(publisher.id, _unpack_ids([batch.ids]),
                                    Refusal.GONE if self.deleted else Refusal.MOVED)
            return
        loop = self.clock
        if not self._count:
            self._pending_since = self.confirm_latency.now()
            if loop.time() - self._last_flush > QUIET_S:
                self._chunk_entries = CHUNK_MIN_ENTRIES  # a burst after a quiet spell starts small
        rest: PublishBatch | None = batch
        while rest is not None:
            room, room_bytes = self._chunk_entries - self._count, CHUNK_MAX_BYTES - self._bytes
            if rest.count <= room and len(rest.data) <= room_bytes:
                part, rest = rest, None
            elif self._count:
                self._flush_full()  # the pending chunk cannot take this batch: write it first
                continue
            else:
                part, rest = rest.cut(room, room_bytes)  # cut before deduplicating
            self._add(publisher, part)
            if self._count >= self._chunk_entries or self._bytes >= CHUNK_MAX_BYTES:
                self._flush_full()
        if self._count and not self._scheduled:
            self._scheduled = True
            wait = self._last_flush + COALESCE_S - loop.time()
            if wait > 0:  # publishes keep coming: let them gather into one bigger chunk
                loop.call_later(wait, self.flush)
            else:
                loop.call_soon(self.flush)

    def _add(self, publisher: Publisher, batch: PublishBatch) -> None:
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

    def _flush_full(self) -> None:
        """Write the pending chunk, which is full: the next one may hold twice as many."""
        self.flush()
        self._chunk_entries = min(2 * self._chunk_entries, CHUNK_MAX_ENTRIES)

    def _deduplicate(self, publisher: Publisher, batch: PublishBatch, last: int) -> PublishBatch:
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
            self._confirm_after_pending(publisher, struct.pack(f">{len(dup)}Q", *dup))
        return _batch_of(batch.publisher_id, kept,
                         kept_filters if batch.filter_values is not None else None)

    def _confirm_after_pending(self, publisher: Publisher, packed: bytes) -> None:
        """Confirm ``packed`` ids (duplicates) no earlier than everything written or pending now:
        their original is among it (Osiris confirms a duplicate once its chunk commits)."""
        if self._count:
            self._confirms[(publisher.conn, publisher.id)].append(packed)
        elif self.commit_end >= self.log.next_offset:
            self._confirm({(publisher.conn, publisher.id): [packed]}, None)
        else:
            self._unconfirmed.append((self.log.next_offset, {(publisher.conn, publisher.id): [packed]},
                                      None))

    def flush(self) -> None:
        self._scheduled = False
        self._last_flush = self.clock.time()
        if not self._data or self.deleted:
            return
        data, confirms, refs = self._data, self._confirms, self._dirty_refs
        count, records, simple = self._count, self._records, self._simple
        self._data, self._count, self._records, self._bytes = [], 0, 0, 0
        self._simple = True
        self._confirms, self._dirty_refs = defaultdict(list), {}
        placed, self._placed = self._placed, []
        # what stays pending after a full chunk was written (publish cuts batches) waits from now
        since, self._pending_since = self._pending_since, self.confirm_latency.now()
        bloom = chunk_bloom(self._filter_values, self.settings.filter_size)
        self._filter_values = set()
        try:
            ref = self.log.append(data, count, records,  # the batches as they came: no join
                                  writer_sequences=refs or None, bloom=bloom, simple=simple)
        except (OSError, ValueError) as e:
            self._write_errors.error("stream %s: write failed: %s", self.name, e)
            self.sequences.update({r: self.log.writer_sequences.get(r, 0) for r in refs})
            for (conn, pid), packed in confirms.items():
                conn.rejected(pid, _unpack_ids(packed), Refusal.WRITE_FAILED)
            return
        self._write_errors.resolved("stream %s: writes succeed again", self.name)
        self.messages_in += records
        self.bytes_in += ref.data_length
        # Where the chunk really went: a segment roll writes its snapshot chunk first.
        for publisher, first_id, position in placed:
            publisher.conn.placed(publisher.id, first_id, ref.chunk_id + position)
        self._written()
        if self._waiting_written:
            self._wake_written()
        if self.awaits_commit:
            self._unconfirmed.append((self.log.next_offset, confirms, since))
            return
        self.commit_end = self.log.next_offset
        self._confirm(confirms, since)
        self._committed()

    def _confirm(self, confirms: dict[tuple[Session, int], list[bytes]],
                 since: float | None) -> None:
        """Send ``confirms``; ``since``: when their chunk took its first publish (None:
        duplicates only, not a latency sample)."""
        n = 0
        for (conn, pid), packed in confirms.items():
            conn.confirmed(pid, packed)
            n += sum(map(len, packed))
        self.confirmed += n >> 3  # 8 bytes per publishing id
        if since is not None:
            self.confirm_latency.observe_since(since)

    # --- the commit point (replicated streams; one copy commits on write) ----------------------

    def commit(self, end: int) -> None:
        """Offsets below ``end`` are on a majority (the leader's commit rule) or the leader said
        so (a follower): confirm what waited for it and let readers see it. Never moves back."""
        if end <= self.commit_end:
            return
        self.commit_end = end
        queue = self._unconfirmed
        while queue and queue[0][0] <= end:
            _, confirms, since = queue.popleft()
            self._confirm(confirms, since)
        self._committed()

    def forget_unconfirmed(self) -> None:
        """No longer this stream's leader: what waited for a commit here will not get one (its
        publishers were told; they resend to the new leader, which deduplicates)."""
        self._unconfirmed.clear()

    def _committed(self) -> None:
        for sub in list(self.subscriptions):
            sub.pump()
        if self._waiting:
            self._wake(self.commit_end)

    @property
    def committed_chunk_id(self) -> int:
        """The last committed user chunk's id (-1: none), as Deliver v2 and StreamStats give it."""
        lg = self.log
        if self.commit_end >= lg.next_offset:
            return lg.last_chunk_id
        return lg.last_user_before(self.commit_end)

    def appended(self) -> None:
        """A follower's log took chunks its leader sent: wake this member's replication readers.
        Its other readers wait for the leader's ``commit``."""
        self._written()
        if self._waiting_written:
            self._wake_written()

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

    def seal(self) -> set[Publisher]:
        """Stop taking publishes (the stream moved to another broker); what is pending was
        published before, so it is written and confirmed first. Returns the publishers, now
        dropped: their connections are told the stream is not available here."""
        self.flush()
        self.sealed = True
        publishers, self.publishers = self.publishers, set()
        return publishers

    # --- consumer offsets ----------------------------------------------------------------------

    def store_offset(self, reference: str, offset: int) -> None:
        self.flush()  # keep the log's order: tracking after the data it refers to
        self.log.store_offset(reference, offset)
        self._written()
        if not self.awaits_commit:
            self.commit_end = self.log.next_offset
        if self._waiting_written:  # a leader's followers take the tracking chunk too
            self._wake_written()

    def stats(self) -> dict[str, int]:
        self.flush()  # what was confirmed is counted
        lg = self.log
        return {
            "first_chunk_id": lg.first_chunk_id,
            "committed_chunk_id": self.committed_chunk_id,
            "last_chunk_id": lg.last_chunk_id,
            "sealed": int(self.sealed),
        }

    def details(self) -> dict[str, int]:
        """``stats()`` and what `streamlet streams info` shows besides (streamlet's own keys in
        StreamStats' map, which RabbitMQ's clients ignore): offsets, messages, bytes on disk,
        segments, retention, and ``offset:<name>`` / ``sequence:<reference>`` for each stored
        consumer offset and publisher sequence."""
        lg, settings = self.log, self.settings
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

    def holders(self) -> set[Session]:
        return {p.conn for p in self.publishers} | {s.conn for s in self.subscriptions} | self.watchers

    def close(self) -> None:
        self.flush()
        self.log.close()

    # --- pull reads: request/response protocols and replication read without a subscription --

    def fetch(self, offset: int, max_bytes: int) -> list[tuple[ChunkRef, memoryview]]:
        """The committed chunks from the one holding ``offset`` (or the first after it), up to
        about ``max_bytes`` (always one whole chunk at least); [] when there is none yet."""
        if offset >= self.commit_end:
            return []
        ref = self.log.find_chunk(offset)
        if ref is None:
            return []
        end = self.commit_end
        return [c for c in self.log.read_chunks(ref, max_bytes) if c[0].chunk_id < end]

    def when_stored(self, offset: int, callback: Callable[[], object]) -> None:
        """Call ``callback`` once data at ``offset`` or past it is committed, or the stream is
        deleted: at once if that is already so. A long poll is this plus fetch."""
        if self.deleted or offset < self.commit_end:
            callback()
        else:
            self._waiting.append((offset, callback))

    def when_written(self, offset: int, callback: Callable[[], object]) -> None:
        """As ``when_stored``, but on the write, before the commit: replication sends a
        leader's chunks to its followers as soon as they are written."""
        if self.deleted or offset < self.log.next_offset:
            callback()
        else:
            self._waiting_written.append((offset, callback))

    def mark_deleted(self) -> None:
        """Deleted: no more publishes, and pull readers are woken to find it gone."""
        self.deleted = True
        self._wake(1 << 64)
        self._wake_written()

    def _wake(self, stored_up_to: int) -> None:
        """Call the pull readers whose offset is now below ``stored_up_to``."""
        due = [cb for off, cb in self._waiting if off < stored_up_to]
        self._waiting = [(off, cb) for off, cb in self._waiting if off >= stored_up_to]
        for cb in due:
            cb()

    def _wake_written(self) -> None:
        end = (1 << 64) if self.deleted else self.log.next_offset
        due = [cb for off, cb in self._waiting_written if off < end]
        self._waiting_written = [(off, cb) for off, cb in self._waiting_written if off >= end]
        for cb in due:
            cb()


def _remove(d: Path) -> bool:
    """Remove a directory tree; a failure is logged (with what is left), not raised: rmtree
    with an error handler goes on past what it cannot remove and reports each."""
    errors: list[str] = []

    def failed(_func: object, path: str, exc: object) -> None:  # onexc: the error; onerror: exc_info
        errors.append(f"{path}: {exc[1] if isinstance(exc, tuple) else exc}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(d, onexc=failed)
    else:
        shutil.rmtree(d, onerror=failed)
    if errors:
        log.error("could not remove %s (removed again at the next start): %s",
                  d, "; ".join(errors[:5]) or "still there")
        return False
    return True


def _batch_of(publisher_id: int, msgs: list[tuple[int, bytes, int]],
              filters: list[str | None] | None) -> PublishBatch:
    ids = [m[0] for m in msgs]
    increasing = all(a < b for a, b in zip(ids, ids[1:], strict=False))
    return PublishBatch(
        publisher_id, len(msgs), struct.pack(f">{len(ids)}Q", *ids),
        b"".join(m[1] for m in msgs), sum(m[2] for m in msgs), ids[0] if ids else 0,
        ids[-1] if ids else 0, increasing, filters,
    )


def _unpack_ids(packed: list[bytes]) -> list[int]:
    raw = b"".join(packed)
    return list(struct.unpack(f">{len(raw) // 8}Q", raw))


#: The longest file name Linux file systems take (NAME_MAX), in bytes.
NAME_MAX = 255


def dir_name(name: str) -> str:
    """The directory name for a stream (or virtual host) called ``name``: the name URL-quoted
    (a leading dot too), or, when that is longer than NAME_MAX (a 1-255-byte name can quote to
    765), ``#`` and the SHA-256 of the name in hex: 65 bytes whatever the name. Quoting never
    writes ``#``, so the two forms cannot collide. The real name is in ``stream.json``."""
    encoded = quote(name, safe="")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    if len(encoded) <= NAME_MAX:
        return encoded
    return "#" + hashlib.sha256(name.encode()).hexdigest()


def valid_stream_name(name: str) -> str | None:
    """None if ``name`` can be a stream, else why not: the rules RabbitMQ has (kept for every
    protocol, so a stream made through one is reachable through all), plus file safety."""
    raw = name.encode()
    if not name or len(raw) > 255:
        return "a stream name has 1 to 255 bytes"
    if name.startswith("amq."):
        return "names starting with 'amq.' are reserved"
    if any(c in name for c in "\x00\n\r"):
        return "a stream name cannot contain NUL or line breaks"
    return None


#: descriptors an open stream holds: its directory's lock and the segment it appends to (its
#: index is opened per write of its records; segments it reads are in the file cache)
FDS_PER_STREAM = 2
#: descriptors a create leaves free besides the file cache's room (listeners, a few
#: connections, a directory scan): connections past it are refused by the kernel, not streams
FD_RESERVE = 64


class StreamUnreadable(OSError):
    """A create of a stream whose directory was set aside at start (it could not be read)."""


class LimitReached(Exception):
    """A create would pass one of the broker's limits: answered 17 (precondition failed)."""


class Limits:
    """The broker's limits on streams, shared by the stream managers of all virtual hosts:
    ``max_streams`` (all vhosts, super stream partitions included; 0 = none),
    ``max_partitions`` (per super stream; 0 = none), and the process's descriptors: a create
    is refused while what is open, its streams' descriptors, the room left in the file cache
    and FD_RESERVE would pass RLIMIT_NOFILE. So the streams a broker holds always fit in its
    descriptors, and it restarts on them (a restart opens no more than were open)."""

    def __init__(self, max_streams: int = 0, max_partitions: int = 0) -> None:
        self.max_streams = max_streams
        self.max_partitions = max_partitions
        self.managers: list[StreamManager] = []

    def stream_count(self) -> int:
        return sum(len(m.streams) for m in self.managers)

    def check(self, n: int, what: str) -> None:
        """Raise LimitReached (logged, with why) if ``n`` more streams do not fit."""
        why = self._why(n)
        if why is not None:
            log.warning("%s refused: %s", what, why)
            raise LimitReached(why)

    def _why(self, n: int) -> str | None:
        if self.max_streams:
            have = self.stream_count()
            if have + n > self.max_streams:
                return (f"{have} streams exist and limits.max_streams is {self.max_streams}"
                        f" ({n} more asked)")
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            return None
        try:
            used = len(os.listdir("/proc/self/fd"))
        except OSError:  # no /proc: the other limits only
            return None
        need = n * FDS_PER_STREAM + max(files.limit - len(files), 0) + FD_RESERVE
        if used + need > soft:
            return (f"{n} more stream(s) need {n * FDS_PER_STREAM} file descriptors; {used} of "
                    f"{soft} (RLIMIT_NOFILE) are open and the file cache may take "
                    f"{max(files.limit - len(files), 0)} more")
        return None


class StreamManager:
    """All streams of this broker, kept under ``<data_dir>/streams/<dir_name(name)>/``.
    Recovered at start; one that cannot be read (its ``stream.json``, its log) is set aside
    (``unreadable``) and the others are served."""

    def __init__(self, data_dir: Path, clock: Clock, fsync: str = "never",
                 limits: Limits | None = None) -> None:
        self.clock = clock
        self.root = data_dir / "streams"
        self.root.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.streams: dict[str, Stream] = {}
        self.limits = limits if limits is not None else Limits()
        self.limits.managers.append(self)
        #: publish-to-confirm of every stream here, one histogram: a deleted stream's samples
        #: stay counted (a broker-wide histogram never goes back)
        self.confirm_latency = LatencyHistogram()
        #: stream directories set aside at start because they could not be read: why, by
        #: directory. Not served (their names answer "not available"), never removed or
        #: re-created over: an operator looks at them (docs/reliability.md).
        self.unreadable: dict[Path, str] = {}
        for d in sorted(self.root.iterdir()):
            meta = d / "stream.json"
            if not d.is_dir():
                continue
            if not meta.is_file():  # a create or delete that did not finish: not a stream
                log.warning("removing %s: a stream directory without stream.json", d)
                _remove(d)
                continue
            try:
                stream = self._recover(d, meta)
            except Exception as e:  # noqa: BLE001 - one stream's damage never stops the start
                self.set_aside(d, f"{meta}: {type(e).__name__}: {e}")
                continue
            self.streams[stream.name] = stream
            log.info("recovered stream %s: offsets %d..%d", stream.name, stream.log.first_offset,
                     stream.log.next_offset)

    def _recover(self, d: Path, meta: Path) -> Stream:
        doc = json.loads(meta.read_bytes())
        if not isinstance(doc, dict) or not isinstance(doc.get("settings"), dict):
            raise ValueError("not a stream's settings")
        name = doc.get("name", unquote(d.name))
        if not isinstance(name, str) or valid_stream_name(name) is not None:
            raise ValueError(f"name {name!r}")
        return Stream(name, d, StreamSettings.from_json(doc["settings"]), self.fsync,
                      self.clock, self.confirm_latency)

    def set_aside(self, directory: Path, why: str, stream: Stream | None = None) -> None:
        """Stop serving the stream in ``directory`` (``stream``, when it was opened): its files
        stay as they are; the name answers "not available" until the broker starts with it
        readable again."""
        if stream is not None:
            self.streams.pop(stream.name, None)
            stream.log.close()
        self.unreadable[directory] = why
        log.error("stream directory %s set aside, not served: %s", directory, why)

    def unreadable_reason(self, name: str) -> str | None:
        """Why the stream called ``name`` is set aside; None when it is not."""
        return self.unreadable.get(self.root / dir_name(name)) if self.unreadable else None

    def get(self, name: str) -> Stream | None:
        return self.streams.get(name)

    def create(self, name: str, settings: StreamSettings) -> Stream:
        """Create the stream, or raise OSError leaving nothing behind (nothing it could remove),
        or LimitReached (before anything is done)."""
        self.limits.check(1, f"create {name!r}")
        d = self.root / dir_name(name)
        if d in self.unreadable:  # set aside: its files are kept, never replaced
            raise StreamUnreadable(f"create {name!r}: {d} was set aside at start: "
                                   f"{self.unreadable[d]}")
        if d.exists() and not _remove(d):  # leftover of a delete whose removal failed
            raise OSError(f"cannot remove the leftover directory {d}")
        stream = None
        try:
            stream = Stream(name, d, settings, self.fsync, self.clock, self.confirm_latency)
            tmp = d / "stream.json.tmp"
            tmp.write_text(json.dumps({"name": name, "settings": settings.to_json(),
                                       "created": int(time.time() * 1000)}))
            os.replace(tmp, d / "stream.json")  # the stream exists once this file does
        except OSError:
            if stream is not None:
                stream.log.close()
            _remove(d)
            raise
        self.streams[name] = stream
        return stream

    def delete(self, name: str) -> Stream | None:
        """Forget the stream and remove its directory, before returning. ``stream.json`` goes
        first: from then on the stream does not exist, even if the rest cannot be removed (that
        is logged, and tried again at the next start or a create of the same name)."""
        stream = self.streams.pop(name, None)
        if stream is None:
            return None
        stream.mark_deleted()
        stream.log.close()
        try:
            (stream.directory / "stream.json").unlink(missing_ok=True)
        except OSError as e:
            log.error("stream %s deleted, but its stream.json could not be removed: %s", name, e)
        _remove(stream.directory)
        return stream

    def apply_retention(self) -> None:
        now = int(time.time() * 1000)
        for stream in self.streams.values():
            stream.log.apply_retention(now)

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()
