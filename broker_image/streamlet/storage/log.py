"""StreamLog: the durable append-only log of one stream, in the Osiris on-disk layout.

A chunk on disk is byte for byte the chunk a Deliver frame carries (minus bloom and trailer),
so a delivery sends it from the file where ``user_run`` places it, or reads a run of chunks
with one ``pread`` and slices it (``read_chunks``). See docs/storage.md.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import struct
import time
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from streamlet.storage.chunk import (
    CHUNK_TRACKING_DELTA,
    CHUNK_TRACKING_SNAPSHOT,
    CHUNK_USER,
    HEADER,
    HEADER_SIZE,
    MAGIC_VERSION,
    TRACKING_OFFSET,
    crc32,
    encode_tracking,
    simple_entry,
)

from .config import LogConfig
from .entries import all_simple
from .files import files
from .layout import (
    EPOCH,
    FILE_HEADER_SIZE,
    INDEX_HEADER,
    INDEX_RECORD,
    INDEX_RECORD_SIZE,
    INDEX_SUFFIX,
    SEGMENT_HEADER,
    SEGMENT_SUFFIX,
    ChunkRef,
    parse_name,
)
from .recovery import Event, apply_tracking, open_active, replay_tracking
from .segment import (
    Header,
    InvalidChunk,
    LogAhead,
    OutOfOrderChunk,
    Segment,
    StaleEpoch,
    StorageError,
)
from .tracking import Tracking, encode_trailer

log = logging.getLogger(__name__)

Buffer = bytes | bytearray | memoryview

# Index records are buffered and written every 128 records or 4 MB of chunks (and at roll,
# sync, close): after a crash the missing records are rebuilt by reading (and CRC-checking) the
# chunks they describe, so the bound keeps that work small, and the index need not be written
# per chunk.
_INDEX_FLUSH_BYTES = 128 * INDEX_RECORD_SIZE
_INDEX_FLUSH_DATA = 4 << 20
#: Buffers of one chunk's data written with one writev at most (IOV_MAX is 1024 on Linux;
#: header, bloom and trailer take three more); past it they are joined first.
_MAX_PARTS = 1000
_FSYNC_MODES = {"never": 0, "chunk": 1, "interval": 2}
_FSYNC_INTERVAL_S = 1.0
_DEFAULT_CONFIG = LogConfig()


def _write_all(fd: int, *parts: bytes) -> None:
    data = b"".join(parts)
    done = 0
    while done < len(data):
        done += os.write(fd, data[done:])


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RawRun(NamedTuple):
    """Whole chunks back to back in one segment file (``StreamLog.raw_run``)."""

    fd: int
    pos: int
    size: int
    refs: list[ChunkRef]


class StreamLog:
    """One stream's log in ``directory``: segments ``%020d.segment`` with their ``.index``.

    Single-threaded by design (the broker is one asyncio loop). Readers only ever see chunks
    that are in the in-memory table, which is updated after each chunk is written whole.
    """

    def __init__(self, directory: Path | str, config: LogConfig = _DEFAULT_CONFIG) -> None:
        self.directory = Path(directory)
        self.config = config
        self._tracking = Tracking()
        # publisher reference -> last publishing id stored; consumer reference -> offset
        self.writer_sequences: dict[str, int] = self._tracking.sequences
        self.offsets: dict[str, int] = self._tracking.offsets
        self._segments: list[Segment] = []
        self._seg_ids: list[int] = []
        self._index_buf = bytearray()
        self._index_upto = 0  # active segment size covered by written index records
        self._index_failing = False  # an index write failed (logged once until one succeeds)
        self._next = 0
        self._last_ref: ChunkRef | None = None
        self._first_user: int | None = None  # first user chunk id; None: not computed yet
        self._fsync = _FSYNC_MODES[config.fsync]
        self._last_sync = time.monotonic()
        self._max_seg_bytes = config.max_segment_bytes
        self._max_seg_chunks = config.max_segment_chunks
        self._closed = False
        self._epoch = EPOCH
        self.directory.mkdir(parents=True, exist_ok=True)
        # one writer per directory: a second StreamLog (this process or another) would corrupt it
        self._lock_fd = files.open(self.directory, os.O_RDONLY)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise StorageError(f"{self.directory} is open in another StreamLog") from None
        try:
            self._open()
        except BaseException:
            for seg in self._segments:
                seg.close()
            os.close(self._lock_fd)
            raise
        self._epoch = max(EPOCH, self.tail()[0])

    # -- opening -------------------------------------------------------------------------------

    def _open(self) -> None:
        names = os.listdir(self.directory)
        seg_ids = sorted(i for n in names if (i := parse_name(n, SEGMENT_SUFFIX)) is not None)
        idx_ids = {i for n in names if (i := parse_name(n, INDEX_SUFFIX)) is not None}
        # retention deletes a segment before its index: an index alone is a leftover
        for i in idx_ids.difference(seg_ids):
            os.unlink(self.directory / f"{i:020d}{INDEX_SUFFIX}")
        for n in names:
            if n.endswith(".index.tmp"):
                os.unlink(self.directory / n)
        # kept on self from the start so that a failure below closes what was opened
        self._segments = segments = [Segment(self.directory, i) for i in seg_ids]
        # the newest segment holding a whole chunk is the active one; newer empty ones are
        # segments whose first chunk never made it to disk
        events: list[Event] = []
        while segments:
            events = open_active(segments[-1])
            if segments[-1].nchunks or len(segments) == 1:
                break
            log.warning("%s: removing empty segment %s", self.directory, segments[-1].path.name)
            segments.pop().remove_files()
        if not segments:
            self._create_segment(0)
        else:
            self._seg_ids = [s.id for s in segments]
            for seg in segments[:-1]:
                seg.light_open()
        self._index_upto = self._active.size
        active = self._active
        self._next = active.ids[-1] + active.nrec[-1] if active.nchunks else active.id
        replay_tracking(active, events, self._tracking)
        self._last_ref = self._find_last_user()

    def _create_segment(self, seg_id: int) -> None:
        """Make a new segment the active one (the old one, if any, stays as it is)."""
        seg = self._new_segment(seg_id)
        self._segments.append(seg)
        self._seg_ids.append(seg_id)
        self._index_upto = seg.size

    def _new_segment(self, seg_id: int, first: tuple[bytes, ...] = ()) -> Segment:
        """Create the files of segment ``seg_id`` (and write ``first``, a chunk, after the file
        header): every step that can fail, and none of the log's state changed. Returns the
        segment, its append fd open; on failure both files are closed and removed, and the
        error raised."""
        seg = Segment(self.directory, seg_id)
        fd = idx_fd = -1
        try:
            fd = files.open(seg.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
            _write_all(fd, SEGMENT_HEADER, *first)
            idx_fd = files.open(seg.index_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            _write_all(idx_fd, INDEX_HEADER)
            os.close(idx_fd)
            idx_fd = -1
            if self._fsync:
                dfd = files.open(self.directory, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except BaseException:
            for f in (fd, idx_fd):
                if f >= 0:
                    os.close(f)
            for p in (seg.path, seg.index_path):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
                except OSError as e:  # recovery removes a segment without a whole chunk
                    log.warning("%s: cannot remove %s after a failed roll: %s",
                                self.directory, p.name, e)
            raise
        seg.fd = fd
        seg.loaded = True
        return seg

    def reconfigure(self, config: LogConfig) -> None:
        """Apply new settings (segment limits, retention, fsync) from the next write on."""
        self.config = config
        self._fsync = _FSYNC_MODES[config.fsync]
        self._max_seg_bytes = config.max_segment_bytes
        self._max_seg_chunks = config.max_segment_chunks

    @property
    def _active(self) -> Segment:
        return self._segments[-1]

    # -- state ---------------------------------------------------------------------------------

    @property
    def first_offset(self) -> int:
        """First offset still stored (the next offset when the log holds no chunk)."""
        first = self._segments[0]
        return first.id if first.nchunks else self._next

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def next_offset(self) -> int:
        return self._next

    @property
    def first_chunk_id(self) -> int:
        """Id of the first user chunk, -1 when there is none."""
        if self._first_user is None:
            ref = self._user_from(0, 0)
            self._first_user = ref.chunk_id if ref is not None else -1
        return self._first_user

    @property
    def last_chunk_id(self) -> int:
        """Id of the last user chunk, -1 when there is none."""
        return self._last_ref.chunk_id if self._last_ref is not None else -1

    @property
    def committed_chunk_id(self) -> int:
        return self.last_chunk_id  # a single node commits what it wrote

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def user_record_count(self) -> int:
        """Messages stored: the records of user chunks (tracking chunks take offsets too).
        Loads every segment's chunk table: for inspection, not the data path."""
        total = 0
        for si in range(len(self._segments)):
            seg = self._seg(si)
            total += sum(n for n, t in zip(seg.nrec[: seg.nchunks], seg.types[: seg.nchunks],
                                           strict=True) if t == CHUNK_USER)
        return total

    @property
    def epoch(self) -> int:
        """The epoch new chunks are written with: on open, the epoch of the last chunk (1 for
        an empty log); raised by ``open_epoch``, and by ``accept_chunk`` to the epoch of a
        chunk it accepts."""
        return self._epoch

    def tail(self) -> tuple[int, int, int]:
        """``(epoch of the last chunk, id of the last chunk, next offset)`` over chunks of
        EVERY type (unlike ``last_chunk_id``, user chunks only); ``(0, -1, next_offset)`` when
        the log holds no chunk. What a replica tells its leader."""
        for seg in reversed(self._segments):
            if seg.nchunks:
                return seg.last_epoch, seg.last_id, self._next
        return 0, -1, self._next

    def epoch_vector(self) -> list[tuple[int, int]]:
        """``[(epoch, id of the last chunk of that epoch)]`` for each epoch present in the log,
        ascending (Osiris' overview): what a leader sends a replica to truncate by."""
        out: list[tuple[int, int]] = []
        for si, seg in enumerate(self._segments):
            if not seg.nchunks:
                continue
            if seg.first_epoch == seg.last_epoch:  # known without loading the table
                pairs = [(seg.last_epoch, seg.last_id)]
            else:
                seg = self._seg(si)
                epochs, ids, n = seg.epochs, seg.ids, seg.nchunks
                pairs = []
                i = 0
                while i < n:  # epochs never decrease: one bisect per epoch
                    i = bisect_right(epochs, epochs[i], i, n)
                    pairs.append((epochs[i - 1], ids[i - 1]))
            for epoch, cid in pairs:
                if out and out[-1][0] == epoch:
                    out[-1] = (epoch, cid)
                else:
                    out.append((epoch, cid))
        return out

    @property
    def stored_timestamps(self) -> dict[str, int]:
        """Timestamp tracking (type 2) read from the log; kept and re-snapshotted, not written."""
        return self._tracking.timestamps

    # -- writing -------------------------------------------------------------------------------

    def append(self, data: Buffer | Sequence[Buffer], num_entries: int, num_records: int, *,
               writer_sequences: dict[str, int] | None = None, timestamp: int | None = None,
               bloom: bytes = b"", simple: bool | None = None) -> ChunkRef:
        """Write one user chunk holding already-encoded entries (one buffer, or a list of
        buffers written back to back: the publishes' batches, not joined first); the trailer
        records ``writer_sequences`` (publisher reference -> last publishing id in this
        chunk). ``simple``: whether every entry is a simple one, as the caller knows it (None:
        the entries are walked to find out; ChunkRef.simple)."""
        seg = self._writable_segment()
        if num_records < 1:
            raise ValueError("a chunk holds at least one record")
        parts: list[Buffer] = \
            [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
        if len(parts) > _MAX_PARTS:  # more than one writev takes
            parts = [b"".join(parts)]
        ts = _now_ms() if timestamp is None else timestamp
        trailer = encode_trailer(writer_sequences) if writer_sequences else b""
        cid = self._next
        dlen = 0
        crc = 0
        for part in parts:
            dlen += len(part)
            crc = crc32(part, crc)
        blen = len(bloom)
        size = HEADER_SIZE + blen + dlen + len(trailer)
        pos = seg.size
        try:
            header = HEADER.pack(MAGIC_VERSION, CHUNK_USER, num_entries, num_records, ts,
                                 self._epoch, cid, crc, dlen, len(trailer), blen)
        except struct.error as e:  # entries > 65535, bloom > 255 bytes, ...
            raise ValueError(f"chunk does not fit the Osiris header: {e}") from None
        self._write(seg, (header, bloom, *parts, trailer), size)
        if writer_sequences:
            self._tracking.add_sequences(cid, writer_sequences)
        if simple is None:  # SBP's FETCH sends a chunk of simple entries from the file
            simple = all_simple(parts, num_entries, num_records)
        self._written(seg, cid, ts, pos, num_records, size, CHUNK_USER, dlen, blen, self._epoch,
                      simple)
        ref = ChunkRef(cid, num_records, ts, CHUNK_USER, seg.id, pos, size, blen, dlen,
                       self._epoch, simple)
        self._last_ref = ref
        if self._first_user == -1:
            self._first_user = cid
        return ref

    def store_offset(self, reference: str, offset: int) -> None:
        """Record a consumer reference's offset in a tracking delta chunk (takes one offset)."""
        body = encode_tracking(TRACKING_OFFSET, reference, offset)  # validates before writing
        self._writable_segment()
        self._write_tracking(CHUNK_TRACKING_DELTA, body)
        self.offsets[reference] = offset

    def open_epoch(self, epoch: int) -> ChunkRef:
        """Start writing in ``epoch`` (a new leader): write one tracking snapshot chunk (type 2,
        consumers skip it) stamped with it, holding the current tracking state, and return it.
        The commit point may not move until this chunk is committed (the Raft "Figure 8"
        guard). An epoch lower than the last chunk's is refused (StaleEpoch); the same epoch
        writes another opening chunk."""
        last = self.tail()[0]
        if epoch < last:
            raise StaleEpoch(f"{self.directory}: cannot open epoch {epoch}, the log's last "
                             f"chunk has epoch {last}")
        if epoch < 1 or epoch >= 1 << 64:
            raise ValueError(f"epoch out of range: {epoch}")
        previous, self._epoch = self._epoch, epoch
        try:
            # a roll's snapshot is already the new epoch's: an old epoch's chunks are only
            # ever written by that epoch's leader
            self._writable_segment()
            body = self._tracking.snapshot(self.first_offset, self._segments[0].first_ts,
                                           self.config.max_writer_sequences)
            return self._write_tracking(CHUNK_TRACKING_SNAPSHOT, body)
        except BaseException:
            self._epoch = previous
            raise

    def _write_tracking(self, ctype: int, body: bytes) -> ChunkRef:
        """A tracking chunk: one simple entry holding tracking records, one record."""
        seg = self._active
        data = simple_entry(body)
        ts = _now_ms()
        cid = self._next
        size = HEADER_SIZE + len(data)
        pos = seg.size
        epoch = self._epoch
        header = HEADER.pack(MAGIC_VERSION, ctype, 1, 1, ts, epoch, cid, crc32(data),
                             len(data), 0, 0)
        self._write(seg, (header, data), size)
        self._written(seg, cid, ts, pos, 1, size, ctype, len(data), 0, epoch)
        return ChunkRef(cid, 1, ts, ctype, seg.id, pos, size, 0, len(data), epoch)

    def _full(self, size: int, nchunks: int) -> bool:
        """Whether a segment of ``size`` bytes and ``nchunks`` chunks is rolled over before
        the next chunk (Osiris: max bytes or max chunks reached). A segment holds at least 2
        chunks, so the snapshot that opens it never rolls at once. A function of the segment
        alone: a follower rolls at exactly the same chunks as its leader."""
        return nchunks >= 2 and (size >= self._max_seg_bytes or nchunks >= self._max_seg_chunks)

    def _writable_segment(self) -> Segment:
        """The segment the next chunk goes to: the active one, rolled over first when full."""
        seg = self._active
        if self._full(seg.size, seg.nchunks):
            seg = self._roll()
        return seg

    def _written(self, seg: Segment, cid: int, ts: int, pos: int, records: int, size: int,
                 ctype: int, dlen: int, blen: int, epoch: int, simple: bool = False) -> None:
        """After a chunk's write: the chunk table, the next offset, the (buffered) index record,
        and fsync as configured."""
        seg.add(cid, ts, pos, records, size, ctype, dlen, blen, epoch, simple)
        self._next = cid + records
        self._index_buf += INDEX_RECORD.pack(cid, ts, epoch, pos, ctype)
        if len(self._index_buf) >= _INDEX_FLUSH_BYTES \
                or seg.size - self._index_upto >= _INDEX_FLUSH_DATA:
            try:
                self._flush_index()
            except OSError as e:  # the chunk is written: the index (a cache) waits
                if not self._index_failing:
                    log.warning("%s: cannot write index records (kept for the next try): %s",
                                self.directory, e)
                self._index_failing = True
            else:
                self._index_failing = False
        if self._fsync:
            self._sync_after_write(seg)

    def _write(self, seg: Segment, parts: Sequence[Buffer], size: int) -> None:
        """One writev per chunk (no copy of the data); a failed write leaves no partial chunk."""
        fd = seg.fd
        try:
            written = os.writev(fd, parts)
            if written != size:  # short write (rare on regular files): finish it
                rest = memoryview(b"".join(parts))
                while written < size:
                    written += os.write(fd, rest[written:])
        except BaseException:
            try:
                os.ftruncate(fd, seg.size)
            except OSError:
                log.exception("%s: cannot cut a partial chunk", seg.path)
            raise

    def _flush_index(self) -> None:
        buf = self._index_buf
        if buf:
            view = memoryview(buf)
            done = 0
            try:
                fd = files.open(self._active.index_path, os.O_WRONLY | os.O_APPEND)
                try:
                    while done < len(buf):
                        done += os.write(fd, view[done:])
                finally:
                    os.close(fd)
            finally:  # a failed write (disk full) keeps what was not written, for the next
                view.release()
                del buf[:done]
        self._index_upto = self._active.size

    def _fsync_index(self) -> None:
        fd = files.open(self._active.index_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _sync_after_write(self, seg: Segment) -> None:
        if self._fsync == 1:
            os.fdatasync(seg.fd)
            return
        now = time.monotonic()
        if now - self._last_sync >= _FSYNC_INTERVAL_S:
            self._last_sync = now
            os.fdatasync(seg.fd)

    def sync(self) -> None:
        """Write buffered index records and flush the active segment and index to disk."""
        self._flush_index()
        os.fdatasync(self._active.fd)
        self._fsync_index()
        self._last_sync = time.monotonic()

    def _roll(self, with_snapshot: bool = True) -> Segment:
        """Start a new segment named by the next offset. When there is tracking state its first
        chunk is a tracking snapshot, so older segments can go without losing it (as in Osiris).
        Retention runs after the roll. A follower rolls ``with_snapshot=False``: the leader's
        snapshot is the next chunk it accepts, so it lands first in the new segment as well.

        Every step that can fail (creating the files, writing the snapshot) comes before the
        log switches to the new segment: a roll that fails (disk full, out of descriptors)
        leaves the old segment active and writable, and the next write tries the roll again."""
        old = self._active
        self._flush_index()
        if self._fsync:
            os.fdatasync(old.fd)
            self._fsync_index()
        cid = self._next
        snapshot: tuple[bytes, ...] = ()
        epoch = self._epoch
        if with_snapshot and not self._tracking.is_empty():
            body = self._tracking.snapshot(self.first_offset, self._segments[0].first_ts,
                                           self.config.max_writer_sequences)
            data = simple_entry(body)
            ts = _now_ms()
            header = HEADER.pack(MAGIC_VERSION, CHUNK_TRACKING_SNAPSHOT, 1, 1, ts, epoch, cid,
                                 crc32(data), len(data), 0, 0)
            snapshot = (header, data)
        seg = self._new_segment(cid, snapshot)
        # the switch: nothing below fails before the state is whole again
        old.close()  # read through the file cache from now on
        self._segments.append(seg)
        self._seg_ids.append(cid)
        self._index_upto = seg.size
        if snapshot:
            header, data = snapshot
            self._written(seg, cid, ts, seg.size, 1, HEADER_SIZE + len(data),
                          CHUNK_TRACKING_SNAPSHOT, len(data), 0, epoch)
        self.apply_retention()
        return seg

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete the oldest whole segments that retention allows (never the newest); returns
        how many were deleted. max_bytes keeps the newest segments whose total fits; max_age
        deletes, oldest first, segments whose last chunk is older than now minus the age."""
        segs = self._segments
        if len(segs) < 2:
            return 0
        cut = 0  # segments[:cut] go
        if self.config.max_bytes is not None:
            limit = self.config.max_bytes - segs[-1].size
            i = len(segs) - 2
            while i >= 0 and segs[i].size <= limit:
                limit -= segs[i].size
                i -= 1
            cut = i + 1
        if self.config.max_age_ms is not None:
            oldest_kept = (_now_ms() if now_ms is None else now_ms) - self.config.max_age_ms
            while cut < len(segs) - 1 and segs[cut].last_ts < oldest_kept:
                cut += 1
        if not cut:
            return 0
        for seg in segs[:cut]:
            log.info("%s: retention deletes %s", self.directory, seg.path.name)
            seg.remove_files()
        del segs[:cut]
        del self._seg_ids[:cut]
        self._first_user = None
        if self._last_ref is not None and self._last_ref.segment < self._seg_ids[0]:
            self._last_ref = self._find_last_user()
        return cut

    # -- reading -------------------------------------------------------------------------------

    def _seg_index(self, seg_id: int) -> int:
        i = bisect_left(self._seg_ids, seg_id)
        return i if i < len(self._seg_ids) and self._seg_ids[i] == seg_id else -1

    def _seg(self, si: int) -> Segment:
        seg = self._segments[si]
        if not seg.loaded:
            end = self._seg_ids[si + 1] if si + 1 < len(self._seg_ids) else self._next
            seg.load(end)
        return seg

    def _user_from(self, si: int, ci: int) -> ChunkRef | None:
        """The first user chunk at or after chunk ``ci`` of segment ``si``."""
        while si < len(self._segments):
            seg = self._seg(si)
            i = seg.next_user(ci)
            if i >= 0:
                return seg.ref(i)
            si += 1
            ci = 0
        return None

    def _find_last_user(self) -> ChunkRef | None:
        for si in range(len(self._segments) - 1, -1, -1):
            seg = self._seg(si)
            i = seg.prev_user(seg.nchunks - 1)
            if i >= 0:
                return seg.ref(i)
        return None

    def find_chunk(self, offset: int) -> ChunkRef | None:
        """The user chunk holding ``offset``, else the first user chunk after it (the first
        chunk for an offset before the log); None if ``offset >= next_offset`` or no user chunk
        follows."""
        if offset >= self._next:
            return None
        si = bisect_right(self._seg_ids, offset) - 1
        if si < 0:
            return self._user_from(0, 0)
        seg = self._seg(si)
        ci = seg.locate(offset)
        if ci < 0:
            ci = 0
        elif offset >= seg.ids[ci] + seg.nrec[ci]:
            ci += 1
        return self._user_from(si, ci)

    def end_of(self, chunk_id: int) -> int:
        """The offset after chunk ``chunk_id`` (any type): where what it commits ends. For an
        id past the log, ``next_offset`` (a follower holds a prefix of its leader's log)."""
        if chunk_id >= self._next:
            return self._next
        si = bisect_right(self._seg_ids, chunk_id) - 1
        if si < 0:
            return self.first_offset
        seg = self._seg(si)
        ci = seg.locate(chunk_id)
        return self.first_offset if ci < 0 else seg.ids[ci] + seg.nrec[ci]

    def span_from(self, offset: int) -> tuple[int, int]:
        """``(chunks, bytes)`` of the log from the chunk holding ``offset`` to its end, any
        type, bytes as the chunks take them in the segment files: how far a replica whose
        next offset is ``offset`` is behind. ``(0, 0)`` from ``next_offset`` on. Reads
        segment tables, never chunks: for metrics, not the data path."""
        found = self._run_at(offset)
        if found is None:
            return 0, 0
        seg, ci = found
        chunks, size = seg.nchunks - ci, seg.size - seg.pos[ci]
        for si in range(self._seg_index(seg.id) + 1, len(self._segments)):
            later = self._seg(si)
            chunks += later.nchunks
            size += later.size - FILE_HEADER_SIZE
        return chunks, size

    def last_user_before(self, end: int) -> int:
        """The id of the last user chunk that ends at or before ``end`` (-1: none)."""
        si = min(bisect_right(self._seg_ids, max(end - 1, 0)) - 1, len(self._segments) - 1)
        while si >= 0:
            seg = self._seg(si)
            ci = seg.prev_user(seg.locate(end - 1))
            while ci >= 0 and seg.ids[ci] + seg.nrec[ci] > end:
                ci = seg.prev_user(ci - 1)
            if ci >= 0:
                return seg.ids[ci]
            si -= 1
            end = seg.id
        return -1

    def find_timestamp(self, ts_ms: int) -> ChunkRef | None:
        """The first user chunk whose timestamp is >= ``ts_ms`` (Osiris' timestamp offset spec:
        the first chunk at or after the time, then the next user chunk), None if none."""
        for si, seg in enumerate(self._segments):
            if seg.nchunks and seg.last_ts >= ts_ms:
                seg = self._seg(si)
                ci = bisect_left(seg.ts, ts_ms)
                if ci < seg.nchunks:
                    return self._user_from(si, ci)
        return None

    def last_chunk(self) -> ChunkRef | None:
        return self._last_ref

    def next_chunk(self, ref: ChunkRef) -> ChunkRef | None:
        """The user chunk after ``ref`` (skipping tracking chunks, crossing segments)."""
        last = self._last_ref
        if last is None or ref.chunk_id >= last.chunk_id:
            return None
        si = self._seg_index(ref.segment)
        if si >= 0:
            seg = self._seg(si)
            ci = seg.find_id(ref.chunk_id)
            if ci >= 0:
                return self._user_from(si, ci + 1)
        return self.find_chunk(ref.chunk_id + ref.num_records)  # ref's segment was deleted

    def read_chunks(self, ref: ChunkRef,
                    max_bytes: int = 1 << 20) -> list[tuple[ChunkRef, memoryview]]:
        """``ref`` and the consecutive user chunks after it in its segment, up to about
        ``max_bytes`` (always at least one), each as exactly header (48 bytes) + data: what a
        Deliver frame carries. One pread for the whole run. If retention deleted ``ref``'s
        segment, starts at the first chunk still stored after it; [] if there is none."""
        at = self._user_at(ref)
        if at is None:
            return []
        seg, ci = at
        start, j, mv = _read_run(seg, ci, max_bytes)
        csize = seg.csize
        ids, nrec, tss, pos, types, bloom, dlen, epochs = (
            seg.ids, seg.nrec, seg.ts, seg.pos, seg.types, seg.bloom, seg.dlen, seg.epochs)
        out: list[tuple[ChunkRef, memoryview]] = []
        for k in range(ci, j):
            if types[k] != CHUNK_USER:
                continue
            off = pos[k] - start
            bl = bloom[k]
            if bl < 0:
                seg.fill_header(k, mv, off)
                bl = bloom[k]
            dl = dlen[k]
            if bl == 0:
                view = mv[off : off + HEADER_SIZE + dl]
            else:
                d = off + HEADER_SIZE + bl
                view = memoryview(b"".join((mv[off : off + HEADER_SIZE], mv[d : d + dl])))
            out.append((ChunkRef(ids[k], nrec[k], tss[k], CHUNK_USER, seg.id, pos[k], csize[k],
                                 bl, dl, epochs[k]), view))
        return out

    def user_run(self, ref: ChunkRef, max_bytes: int = 1 << 20,
                 max_chunks: int = 1 << 30) -> RawRun | None:
        """The run ``read_chunks`` would read, not read: ``ref`` and the user chunks after it
        in its segment, up to about ``max_bytes`` and ``max_chunks`` (always one at least), as
        refs with their positions and sizes known (a recovered chunk's header is read once)
        and the segment file's descriptor (as ``segment_fd``'s: use it at once). ``pos`` and
        ``size`` span the run in the file, other chunks between included. If retention
        deleted ``ref``'s segment, starts at the first chunk still stored after it; None if
        there is none."""
        at = self._user_at(ref)
        if at is None:
            return None
        seg, ci = at
        start, j, size = _run_span(seg, ci, max_bytes)
        types = seg.types
        refs: list[ChunkRef] = []
        for k in range(ci, j):
            if types[k] == CHUNK_USER:
                refs.append(seg.ref(k))
                if len(refs) >= max_chunks:
                    last = refs[-1]
                    size = last.pos + last.size - start
                    break
        return RawRun(seg.open_fd(), start, size, refs)

    def _user_at(self, ref: ChunkRef) -> tuple[Segment, int] | None:
        """The segment holding user chunk ``ref`` and its index there; if retention deleted it,
        the first user chunk stored after it; None if there is none."""
        si = self._seg_index(ref.segment)
        if si >= 0:
            seg = self._seg(si)
            ci = seg.find_id(ref.chunk_id)
            if ci >= 0 and seg.types[ci] == CHUNK_USER:
                return seg, ci
        found = self.find_chunk(ref.chunk_id)
        if found is None:
            return None
        seg = self._seg(self._seg_index(found.segment))
        return seg, seg.find_id(found.chunk_id)

    def read_bloom(self, ref: ChunkRef) -> bytes:
        """The chunk's bloom filter bytes (b"" when it has none)."""
        if not ref.bloom_size:
            return b""
        return os.pread(self.segment_fd(ref), ref.bloom_size, ref.pos + HEADER_SIZE)

    def segment_fd(self, ref: ChunkRef) -> int:
        """A readable fd of ref's segment file (for sendfile of ``ref.pos + 48 + bloom_size``,
        ``data_length`` bytes). Use it at once: reading another segment (of any log of the
        process) may close it (storage/files.py), as may retention or closing the log."""
        si = self._seg_index(ref.segment)
        if si < 0:
            raise StorageError(f"segment {ref.segment} was deleted")
        return self._segments[si].open_fd()

    # -- replication -----------------------------------------------------------------------------

    def read_raw(self, offset: int,
                 max_bytes: int = 1 << 20) -> list[tuple[ChunkRef, memoryview]]:
        """Whole chunks as stored (header, bloom, data, trailer), of EVERY type, from the chunk
        holding ``offset`` (the first chunk for an offset before the log) and the chunks after
        it IN THE SAME SEGMENT, up to about ``max_bytes`` (always at least one): one pread.
        What a leader sends a follower; the next call starts at the last ref's next_offset and
        goes on in the next segment. [] from ``next_offset`` on."""
        found = self._run_at(offset)
        if found is None:
            return []
        seg, ci = found
        start, j, mv = _read_run(seg, ci, max_bytes)
        csize = seg.csize
        out: list[tuple[ChunkRef, memoryview]] = []
        for k in range(ci, j):
            off = seg.pos[k] - start
            if seg.bloom[k] < 0:
                seg.fill_header(k, mv, off)
            out.append((seg.ref(k), mv[off : off + csize[k]]))
        return out

    def raw_run(self, offset: int, max_bytes: int = 1 << 20) -> RawRun | None:
        """The run ``read_raw`` would read, not read: where its bytes are in which file, for a
        leader that sends them with sendfile (no copy through the process). None from
        ``next_offset`` on. ``fd`` is as ``segment_fd``'s: use it at once."""
        found = self._run_at(offset)
        if found is None:
            return None
        seg, ci = found
        start, j, size = _run_span(seg, ci, max_bytes)
        return RawRun(seg.open_fd(), start, size, [seg.ref(k) for k in range(ci, j)])

    def _run_at(self, offset: int) -> tuple[Segment, int] | None:
        """The segment and chunk index a raw run from ``offset`` starts at; None past the end."""
        if offset >= self._next:
            return None
        si = max(bisect_right(self._seg_ids, offset) - 1, 0)
        seg = self._seg(si)
        ci = max(seg.locate(offset), 0)
        while ci >= seg.nchunks:  # an empty segment (a roll without snapshot, not yet written)
            si += 1
            if si >= len(self._segments):
                return None
            seg, ci = self._seg(si), 0
        return seg, ci

    def accept_chunk(self, raw: Buffer) -> ChunkRef:
        """A follower writes one whole chunk its leader sent (see ``accept_chunks``)."""
        mv = memoryview(raw).cast("B")
        try:
            size = Header(mv).size
        except (ValueError, struct.error):
            size = -1  # accept_chunks says what is wrong
        if size >= 0 and size != len(mv):
            raise InvalidChunk(f"one chunk of {size} bytes expected, {len(mv)} given")
        self.accept_chunks(mv)
        return self._active.ref(self._active.nchunks - 1)

    def accept_chunks(self, buf: Buffer) -> int:
        """A follower writes whole chunks its leader sent (from ``read_raw``), byte for byte,
        and returns how many. Every chunk is checked first (magic, header, whole, data CRC:
        InvalidChunk; id == next_offset: OutOfOrderChunk; epoch not below the last chunk's:
        StaleEpoch): one bad chunk and nothing is written. Segments roll by the leader's rule
        but without a snapshot of their own (the leader's is among the chunks); the chunks of
        one segment go in one write. Table, index, writer sequences and offsets are updated
        as the leader's own writes update them."""
        mv = memoryview(buf).cast("B")
        checked: list[tuple[int, Header]] = []
        pos, expect, epoch = 0, self._next, self.tail()[0]
        while pos < len(mv):
            h = self._check_chunk(mv, pos, expect, epoch)
            checked.append((pos, h))
            pos += h.size
            expect += h.num_records
            epoch = h.epoch
        i = 0
        while i < len(checked):
            seg = self._active
            if self._full(seg.size, seg.nchunks):
                seg = self._roll(with_snapshot=False)
            size, n, j = seg.size, seg.nchunks, i
            while j < len(checked) and (j == i or not self._full(size, n)):
                size += checked[j][1].size
                n += 1
                j += 1
            first = checked[i][0]
            end = checked[j - 1][0] + checked[j - 1][1].size
            self._write(seg, (mv[first:end],), end - first)
            for at, h in checked[i:j]:
                self._accepted(seg, mv, at, h)
            i = j
        return len(checked)

    def _check_chunk(self, mv: memoryview, pos: int, expect: int, last_epoch: int) -> Header:
        if len(mv) - pos < HEADER_SIZE:
            raise InvalidChunk(f"truncated chunk header ({len(mv) - pos} bytes)")
        try:
            h = Header(mv, pos)
        except ValueError:
            raise InvalidChunk(f"bad chunk magic or type: {bytes(mv[pos : pos + 2]).hex()}") \
                from None
        if h.num_records < 1:
            raise InvalidChunk(f"chunk {h.chunk_id} holds no record")
        if pos + h.size > len(mv):
            raise InvalidChunk(f"chunk {h.chunk_id} is cut: {h.size} bytes, "
                               f"{len(mv) - pos} given")
        if h.size > 0xFFFFFFFF - FILE_HEADER_SIZE:
            raise InvalidChunk(f"chunk {h.chunk_id} too large")
        if h.chunk_id != expect:
            raise OutOfOrderChunk(f"{self.directory}: chunk {h.chunk_id} offered, "
                                  f"{expect} expected")
        if h.epoch < last_epoch:
            raise StaleEpoch(f"{self.directory}: chunk {h.chunk_id} has epoch {h.epoch}, "
                             f"below the last chunk's {last_epoch}")
        data = pos + HEADER_SIZE + h.bloom_size
        if crc32(mv[data : data + h.data_length]) != h.crc:
            raise InvalidChunk(f"chunk {h.chunk_id}: bad data CRC")
        return h

    def _accepted(self, seg: Segment, mv: memoryview, at: int, h: Header) -> None:
        """After an accepted chunk's write: what the leader's write of it did."""
        cid, ctype = h.chunk_id, h.chunk_type
        pos = seg.size
        self._written(seg, cid, h.timestamp, pos, h.num_records, h.size, ctype, h.data_length,
                      h.bloom_size, h.epoch)
        if h.epoch > self._epoch:
            self._epoch = h.epoch
        data = at + HEADER_SIZE + h.bloom_size
        if ctype == CHUNK_USER:
            if h.trailer_length:
                trailer = mv[data + h.data_length : data + h.data_length + h.trailer_length]
                apply_tracking(self._tracking, cid, ctype, trailer, seg.path)
            self._last_ref = ChunkRef(cid, h.num_records, h.timestamp, CHUNK_USER, seg.id, pos,
                                      h.size, h.bloom_size, h.data_length, h.epoch)
            if self._first_user == -1:
                self._first_user = cid
        else:
            apply_tracking(self._tracking, cid, ctype, mv[data : data + h.data_length],
                           seg.path)

    def truncate_to(self, leader_vector: Sequence[tuple[int, int]],
                    leader_first_offset: int) -> int:
        """Make the log a prefix of the leader's (Osiris' init_acceptor) and return the offset
        to fetch from. ``leader_vector`` is the leader's ``epoch_vector()``,
        ``leader_first_offset`` its ``first_offset``. Walking the vector from the top, for
        ``(E, ChId)`` when the log holds chunks of epoch E (the last one ``t``):

        - ``t <= ChId``: keep up to ``t`` (everything when ``t`` is the last chunk: catch up);
        - ``t > ChId``: cut right after chunk ``ChId`` (it is there, of epoch E);

        an epoch the log does not hold: the next lower one. Chunks of one epoch are written by
        one leader, so equal (epoch, id) is equal bytes and the kept prefix is the leader's.
        When nothing matches, or the kept log would end before ``leader_first_offset`` (the
        leader no longer has what follows it, osiris#42), the log is emptied and starts at
        ``leader_first_offset``, the leader's first chunk (osiris#43: really emptied, its next
        offset moved).

        A log ahead of the leader (a later last epoch, or more chunks of the leader's last
        epoch than the leader) raises LogAhead and is left alone. The tracking state is
        rebuilt from the kept prefix as recovery does; ``epoch`` is not lowered."""
        vec = [(int(e), int(c)) for e, c in leader_vector]
        for (e0, c0), (e1, c1) in zip(vec, vec[1:], strict=False):
            if e1 <= e0 or c1 <= c0:
                raise ValueError(f"not an epoch vector: {vec}")
        last_epoch, last_id, nxt = self.tail()
        if vec:
            top_epoch, top_id = vec[-1]
            if last_epoch > top_epoch or (last_epoch == top_epoch and last_id > top_id):
                raise LogAhead(f"{self.directory}: local tail (epoch {last_epoch}, chunk "
                               f"{last_id}) is beyond the leader's ({top_epoch}, {top_id})")
        local = dict(self.epoch_vector())
        for epoch, cid in reversed(vec):
            t = local.get(epoch)
            if t is None:
                continue
            keep = min(t, cid)
            si = bisect_right(self._seg_ids, keep) - 1
            seg = self._seg(si)
            ci = seg.find_id(keep)
            if ci < 0 or seg.epochs[ci] != epoch:
                raise StorageError(f"{self.directory}: the leader's chunk {keep} of epoch "
                                   f"{epoch} is not a chunk here")
            if seg.ids[ci] + seg.nrec[ci] < leader_first_offset:
                break  # osiris#42: what follows is gone from the leader
            if keep != last_id:
                self._cut_after(si, ci)
            return self._next
        if last_id >= 0 or nxt != leader_first_offset:
            self._reset(leader_first_offset)
        return self._next

    def _cut_after(self, si: int, ci: int) -> None:
        """Delete every chunk after chunk ``ci`` of segment ``si``, then reload the log's state
        from disk as recovery does. Newest files first: a crash leaves a shorter prefix."""
        try:
            self._flush_index()
        except OSError:  # recovery rebuilds the missing records from the segment
            self._index_buf.clear()
        for seg in reversed(self._segments[si + 1 :]):
            seg.remove_files()
        del self._segments[si + 1 :]
        del self._seg_ids[si + 1 :]
        seg = self._segments[si]
        end = seg.pos[ci] + seg.csize[ci]
        for path, size in ((seg.path, end),
                           (seg.index_path, FILE_HEADER_SIZE + (ci + 1) * INDEX_RECORD_SIZE)):
            try:
                fd = files.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                if os.fstat(fd).st_size > size:
                    os.ftruncate(fd, size)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        log.info("%s: truncated after chunk %d", self.directory, seg.ids[ci])
        self._reload()

    def _reset(self, next_offset: int) -> None:
        """Delete every segment and start an empty log whose next chunk is ``next_offset``."""
        self._index_buf.clear()
        for seg in reversed(self._segments):
            seg.remove_files()
        self._segments, self._seg_ids = [], []
        self._create_segment(next_offset)
        log.info("%s: emptied, next offset %d", self.directory, next_offset)
        self._reload()

    def _reload(self) -> None:
        """Drop the in-memory state and open the directory again, as at start."""
        for seg in self._segments:
            seg.close()
        self._segments, self._seg_ids = [], []
        self._index_buf.clear()
        t = self._tracking
        for d in (t.sequences, t.sequence_chunks, t.offsets, t.timestamps):
            d.clear()
        self._last_ref, self._first_user = None, None
        self._open()
        self._epoch = max(self._epoch, self.tail()[0])

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._flush_index()
            if self._fsync:
                os.fdatasync(self._active.fd)
                self._fsync_index()
        finally:
            for seg in self._segments:
                seg.close()
            os.close(self._lock_fd)

    def delete(self) -> None:
        """Close the log and remove its directory."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> StreamLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"StreamLog({str(self.directory)!r}, first={self.first_offset}, "
                f"next={self._next}, segments={len(self._segments)})")


def _run_span(seg: Segment, ci: int, max_bytes: int) -> tuple[int, int, int]:
    """Chunk ``ci`` of ``seg`` and the chunks after it in the segment, up to about
    ``max_bytes`` (at least the one): the run's file position, the index after its last
    chunk, and its size."""
    csize, n = seg.csize, seg.nchunks
    start = seg.pos[ci]
    total = csize[ci]
    j = ci + 1
    while j < n and total + csize[j] <= max_bytes:
        total += csize[j]
        j += 1
    return start, j, total


def _read_run(seg: Segment, ci: int, max_bytes: int) -> tuple[int, int, memoryview]:
    """``_run_span``'s run, read with one pread: its file position, the index after its last
    chunk, and the bytes."""
    start, j, total = _run_span(seg, ci, max_bytes)
    buf = os.pread(seg.open_fd(), total, start)
    if len(buf) != total:
        raise StorageError(f"{seg.path}: short read at {start} ({len(buf)} of {total})")
    return start, j, memoryview(buf)
