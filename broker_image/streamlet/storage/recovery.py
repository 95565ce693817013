"""Opening the last (active) segment after a clean stop or a crash.

A crash can leave a torn chunk at the end of the segment (a partial write), index records
that point at it or past the end, an index that lags behind the segment (the log buffers index
records), or a torn index. The segment is the truth: index records are kept only while they
agree with the chunk headers, the last indexed chunk's CRC is checked, whole chunks after it
are taken from the segment (each CRC-checked), and everything after the last good chunk is cut.
"""

from __future__ import annotations

import logging
import os

from streamlet.storage.chunk import CHUNK_TRACKING_DELTA, CHUNK_USER, HEADER_SIZE, ChunkError

from .files import files
from .layout import (
    FILE_HEADER_SIZE,
    INDEX_HEADER,
    INDEX_RECORD,
    INDEX_RECORD_SIZE,
    SEGMENT_HEADER,
)
from .segment import (
    Header,
    Segment,
    StorageError,
    data_crc_ok,
    read_header,
    read_index,
    scan_chunks,
)
from .tracking import Tracking

log = logging.getLogger(__name__)


# Chunks up to this size are read in blocks (the kernel reads whole pages anyway); the header
# and trailer of a larger chunk are read on their own.
_SMALL_CHUNK = 4096
_BLOCK = 1 << 20

# (chunk index, chunk type, trailer or tracking data) for chunks that carry tracking
Event = tuple[int, int, bytes]


class _Reader:
    """Reads small ranges of a file through one cached block."""

    __slots__ = ("buf", "fd", "size", "start")

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        self.buf = memoryview(b"")
        self.start = 0

    def get(self, pos: int, n: int, small: bool) -> bytes | memoryview:
        off = pos - self.start
        if off >= 0 and off + n <= len(self.buf):
            return self.buf[off : off + n]
        if not small:
            return os.pread(self.fd, n, pos)
        self.buf = memoryview(os.pread(self.fd, min(_BLOCK, self.size - pos), pos))
        self.start = pos
        return self.buf[:n]


def _header(buf: bytes | memoryview, pos: int, file_size: int) -> Header | None:
    if len(buf) < HEADER_SIZE:
        return None
    try:
        h = Header(buf)
    except ValueError:
        return None
    return h if h.num_records >= 1 and pos + h.size <= file_size else None


def _collect(rd: _Reader, events: list[Event], i: int, pos: int, h: Header, small: bool) -> None:
    """Keep the bytes tracking recovery needs from chunk ``i``."""
    data = pos + HEADER_SIZE + h.bloom_size
    if h.chunk_type != CHUNK_USER:
        events.append((i, h.chunk_type, bytes(rd.get(data, h.data_length, small))))
    elif h.trailer_length:
        trailer = rd.get(data + h.data_length, h.trailer_length, small)
        events.append((i, CHUNK_USER, bytes(trailer)))


def open_active(seg: Segment) -> list[Event]:
    """Open ``seg`` for appending (``seg.fd``), repair its tail and index, load its table with
    every header field. Returns the tracking data of the segment's chunks, in order, for
    :func:`replay_tracking`."""
    fd = files.open(seg.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    seg.close()
    seg.fd = fd
    size = os.fstat(fd).st_size
    head = os.pread(fd, FILE_HEADER_SIZE, 0)
    if head != SEGMENT_HEADER:
        if size >= FILE_HEADER_SIZE or not SEGMENT_HEADER.startswith(head):
            raise StorageError(f"{seg.path}: not an Osiris segment")
        os.ftruncate(fd, 0)  # a torn file header: the segment was being created
        os.write(fd, SEGMENT_HEADER)
        size = FILE_HEADER_SIZE
    seg.reset_table()

    records = read_index(seg.index_path)
    index_ok = records is not None
    recs = records or []
    rd = _Reader(fd, size)
    events: list[Event] = []
    kept = 0
    pos, expect = FILE_HEADER_SIZE, seg.id
    for k, (cid, _ts, epoch, fpos, ctype) in enumerate(recs):
        if fpos != pos or cid != expect:
            break
        span = (recs[k + 1][3] if k + 1 < len(recs) else size) - fpos
        small = 0 < span <= _SMALL_CHUNK
        h = _header(rd.get(pos, HEADER_SIZE, small), pos, size)
        if h is None or h.chunk_id != cid or h.chunk_type != ctype or h.epoch != epoch:
            break
        seg.add_header(pos, h)
        _collect(rd, events, kept, pos, h, small)
        kept += 1
        pos += h.size
        expect += h.num_records
    # the last indexed chunk's data may never have reached the file
    while seg.nchunks:
        i = seg.nchunks - 1
        h = read_header(fd, seg.pos[i], size)
        if h is not None and data_crc_ok(fd, seg.pos[i], h):
            break
        log.warning("%s: dropping chunk %d (bad CRC)", seg.path, seg.ids[i])
        seg.pop()
        kept = min(kept, seg.nchunks)
    expect = seg.ids[-1] + seg.nrec[-1] if seg.nchunks else seg.id
    for p, h in scan_chunks(fd, seg.size, expect, size, True):
        seg.add_header(p, h)
        _collect(rd, events, seg.nchunks - 1, p, h, False)
    if size > seg.size:
        log.warning("%s: cutting %d bytes of torn data after chunk end %d", seg.path,
                    size - seg.size, seg.size)
        os.ftruncate(fd, seg.size)

    idx_fd = files.open(seg.index_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not index_ok:
            kept = 0
        end = FILE_HEADER_SIZE + kept * INDEX_RECORD_SIZE
        os.ftruncate(idx_fd, end)
        os.pwrite(idx_fd, INDEX_HEADER, 0)
        missing = b"".join(
            INDEX_RECORD.pack(seg.ids[i], seg.ts[i], seg.epochs[i], seg.pos[i], seg.types[i])
            for i in range(kept, seg.nchunks)
        )
        if missing:
            os.pwrite(idx_fd, missing, end)
    finally:
        os.close(idx_fd)
    seg.loaded = True
    n = seg.nchunks
    return [e for e in events if e[0] < n]


def replay_tracking(seg: Segment, events: list[Event], tracking: Tracking) -> None:
    """Rebuild writer sequences and consumer offsets from the active segment: its first chunk
    is a snapshot of the state when it was opened (if that state was not empty), then deltas
    and user-chunk trailers apply in order, exactly as Osiris recovers its tracking."""
    for i, ctype, data in events:
        apply_tracking(tracking, seg.ids[i], ctype, data, seg.path)


def apply_tracking(tracking: Tracking, chunk_id: int, ctype: int, data: bytes | memoryview,
                   where: object) -> None:
    """Apply one chunk's tracking to ``tracking``: ``data`` is a user chunk's trailer, or a
    tracking chunk's data (one simple entry). Malformed data is logged and skipped (recovery
    and a follower's ``accept_chunk`` treat it alike)."""
    try:
        if ctype == CHUNK_USER:
            tracking.apply_records(chunk_id, data)
            return
        n = int.from_bytes(data[:4], "big")
        if len(data) < 4 or n & 0x80000000 or 4 + n > len(data):
            raise ChunkError("tracking chunk without a simple entry")
        body = memoryview(data)[4 : 4 + n]
        if ctype == CHUNK_TRACKING_DELTA:
            tracking.apply_records(chunk_id, body)
        else:
            tracking.load_snapshot(body)
    except ChunkError as e:
        log.warning("%s: skipping malformed tracking data in chunk %d: %s", where, chunk_id, e)
