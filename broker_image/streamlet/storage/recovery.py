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

from streamlet.protocol.chunk import CHUNK_TRACKING_DELTA, CHUNK_USER, HEADER_SIZE, ChunkError

from .layout import (
    EPOCH,
    FILE_HEADER_SIZE,
    INDEX_HEADER,
    INDEX_RECORD,
    INDEX_RECORD_SIZE,
    SEGMENT_HEADER,
)
from .segment import Segment, StorageError, data_crc_ok, read_header, read_index, scan_chunks
from .tracking import Tracking

log = logging.getLogger(__name__)


def open_active(seg: Segment) -> int:
    """Open ``seg`` for appending (``seg.fd``), repair its tail and index, load its table with
    every header field. Returns the index file's fd, positioned at its end."""
    fd = os.open(seg.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
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
    kept = 0
    pos, expect = FILE_HEADER_SIZE, seg.id
    for cid, _ts, _epoch, fpos, ctype in records or ():
        if fpos != pos or cid != expect:
            break
        h = read_header(fd, pos, size)
        if h is None or h.chunk_id != cid or h.chunk_type != ctype:
            break
        seg.add_header(pos, h)
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
    if size > seg.size:
        log.warning("%s: cutting %d bytes of torn data after chunk end %d", seg.path,
                    size - seg.size, seg.size)
        os.ftruncate(fd, seg.size)

    idx_fd = os.open(seg.index_path, os.O_RDWR | os.O_CREAT, 0o644)
    if not index_ok:
        kept = 0
    end = FILE_HEADER_SIZE + kept * INDEX_RECORD_SIZE
    os.ftruncate(idx_fd, end)
    os.pwrite(idx_fd, INDEX_HEADER, 0)
    missing = b"".join(
        INDEX_RECORD.pack(seg.ids[i], seg.ts[i], EPOCH, seg.pos[i], seg.types[i])
        for i in range(kept, seg.nchunks)
    )
    if missing:
        os.pwrite(idx_fd, missing, end)
    os.lseek(idx_fd, 0, os.SEEK_END)
    seg.loaded = True
    return idx_fd


def replay_tracking(seg: Segment, tracking: Tracking) -> None:
    """Rebuild writer sequences and consumer offsets from the active segment: its first chunk
    is a snapshot of the state when it was opened (if that state was not empty), then deltas
    and user-chunk trailers apply in order, exactly as Osiris recovers its tracking."""
    fd = seg.fd
    for i in range(seg.nchunks):
        ctype, pos, bloom, dlen = seg.types[i], seg.pos[i], seg.bloom[i], seg.dlen[i]
        try:
            if ctype == CHUNK_USER:
                tlen = seg.csize[i] - HEADER_SIZE - bloom - dlen
                if tlen > 0:
                    trailer = os.pread(fd, tlen, pos + HEADER_SIZE + bloom + dlen)
                    tracking.apply_records(seg.ids[i], trailer)
                continue
            data = os.pread(fd, dlen, pos + HEADER_SIZE + bloom)
            n = int.from_bytes(data[:4], "big")
            if len(data) < 4 or n & 0x80000000 or 4 + n > len(data):
                raise ChunkError("tracking chunk without a simple entry")
            body = memoryview(data)[4 : 4 + n]
            if ctype == CHUNK_TRACKING_DELTA:
                tracking.apply_records(seg.ids[i], body)
            else:
                tracking.load_snapshot(body)
        except ChunkError as e:
            log.warning("%s: skipping malformed tracking data in chunk %d: %s", seg.path,
                        seg.ids[i], e)
