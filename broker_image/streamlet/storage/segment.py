"""One segment file and its in-memory chunk table.

The table lists every chunk of the segment (user and tracking) in file order, as parallel
arrays, so millions of chunks cost a few dozen bytes each and no Python object. Old segments
load their table lazily from the index file; header-only fields (bloom size, data length) are
filled on first use from the chunk header.
"""

from __future__ import annotations

import contextlib
import os
import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from streamlet.storage.chunk import (
    CHUNK_TRACKING_SNAPSHOT,
    CHUNK_USER,
    HEADER,
    HEADER_SIZE,
    MAGIC_VERSION,
    crc32,
)

from .files import files
from .layout import (
    FILE_HEADER_SIZE,
    INDEX_HEADER,
    INDEX_RECORD,
    INDEX_RECORD_SIZE,
    SEGMENT_HEADER,
    ChunkRef,
    index_name,
    segment_name,
)


class StorageError(Exception):
    """The log on disk is unusable (not a torn tail, which recovery repairs)."""


class InvalidChunk(StorageError):
    """A chunk offered to ``accept_chunk`` is malformed: magic, header, size or data CRC."""


class OutOfOrderChunk(StorageError):
    """A chunk offered to ``accept_chunk`` is not the next one: its id is not ``next_offset``
    (Osiris' ``accept_chunk_out_of_order``)."""


class StaleEpoch(StorageError):
    """An epoch lower than the epoch of the log's last chunk (a chunk to accept, or
    ``open_epoch``)."""


class LogAhead(StorageError):
    """The local log holds chunks beyond the leader's: a later epoch, or more chunks of the
    leader's last epoch than the leader has (Osiris' ``invalid_last_offset_epoch``)."""


class Header:
    """The fields of a chunk header that the log needs (parsed without a dataclass)."""

    __slots__ = ("bloom_size", "chunk_id", "chunk_type", "crc", "data_length", "epoch",
                 "num_records", "size", "timestamp", "trailer_length")
    bloom_size: int
    chunk_id: int
    chunk_type: int
    crc: int
    data_length: int
    epoch: int
    num_records: int
    size: int
    timestamp: int
    trailer_length: int

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        (magic, self.chunk_type, _entries, self.num_records, self.timestamp, self.epoch,
         self.chunk_id, self.crc, self.data_length, self.trailer_length,
         self.bloom_size) = HEADER.unpack_from(buf, pos)
        if magic != MAGIC_VERSION or self.chunk_type > CHUNK_TRACKING_SNAPSHOT:
            raise ValueError("not a chunk header")
        self.size = HEADER_SIZE + self.bloom_size + self.data_length + self.trailer_length


def read_header(fd: int, pos: int, file_size: int) -> Header | None:
    """The header of the chunk at ``pos`` if it is sane and the chunk fits in the file."""
    if pos + HEADER_SIZE > file_size:
        return None
    buf = os.pread(fd, HEADER_SIZE, pos)
    if len(buf) != HEADER_SIZE:
        return None
    try:
        h = Header(buf)
    except ValueError:
        return None
    if h.num_records < 1 or pos + h.size > file_size:
        return None
    return h


def data_crc_ok(fd: int, pos: int, h: Header) -> bool:
    data = os.pread(fd, h.data_length, pos + HEADER_SIZE + h.bloom_size)
    return len(data) == h.data_length and crc32(data) == h.crc


def scan_chunks(fd: int, pos: int, chunk_id: int, file_size: int,
                verify_crc: bool) -> Iterator[tuple[int, Header]]:
    """Walk whole, sane chunks from ``pos`` (expected to hold ``chunk_id``); stop at the first
    chunk that is torn, out of sequence or (with ``verify_crc``) fails its CRC."""
    while True:
        h = read_header(fd, pos, file_size)
        if h is None or h.chunk_id != chunk_id:
            return
        if verify_crc and not data_crc_ok(fd, pos, h):
            return
        yield pos, h
        pos += h.size
        chunk_id += h.num_records


def read_index(path: Path) -> list[tuple[int, int, int, int, int]] | None:
    """The index records ``(chunk_id, timestamp, epoch, pos, type)``, cut at the first record
    that is torn, zero or out of order; None when the file is missing or its header is wrong."""
    try:
        fd = files.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read()
    finally:
        os.close(fd)
    if raw[:FILE_HEADER_SIZE] != INDEX_HEADER:
        return None
    end = FILE_HEADER_SIZE + (len(raw) - FILE_HEADER_SIZE) // INDEX_RECORD_SIZE * INDEX_RECORD_SIZE
    records = list(INDEX_RECORD.iter_unpack(memoryview(raw)[FILE_HEADER_SIZE:end]))
    prev_id, prev_pos, prev_epoch = -1, FILE_HEADER_SIZE - 1, 0
    for i, (cid, _ts, epoch, pos, ctype) in enumerate(records):
        if (cid <= prev_id or pos <= prev_pos or ctype > CHUNK_TRACKING_SNAPSHOT
                or epoch < prev_epoch):
            return records[:i]
        prev_id, prev_pos, prev_epoch = cid, pos, epoch
    return records


class Segment:
    """A segment file ``%020d.segment`` (named by its first chunk id) and its chunk table."""

    __slots__ = ("bloom", "cached", "csize", "dlen", "epochs", "fd", "first_epoch", "first_ts",
                 "id", "ids", "index_path", "last_epoch", "last_id", "last_ts", "loaded",
                 "nchunks", "nrec", "path", "pos", "simple", "size", "ts", "types")

    def __init__(self, directory: Path, seg_id: int) -> None:
        self.id = seg_id
        self.path = directory / segment_name(seg_id)
        self.index_path = directory / index_name(seg_id)
        self.fd = -1
        #: fd is a read-only descriptor in the process's file cache (not the append fd)
        self.cached = False
        self.size = FILE_HEADER_SIZE  # bytes of whole chunks, plus the file header
        self.loaded = False
        self.nchunks = 0
        self.first_ts = 0
        self.last_ts = 0
        # known without loading the table (light_open reads them from the index)
        self.first_epoch = 0
        self.last_epoch = 0
        self.last_id = -1
        self.ids = array("q")
        self.ts = array("q")
        self.pos = array("q")
        self.nrec = array("I")
        self.csize = array("q")
        self.types = array("B")
        self.dlen = array("I")
        self.bloom = array("h")  # -1: header fields not read yet
        self.epochs = array("Q")
        self.simple = array("B")  # 1: ChunkRef.simple (known only for chunks appended here)

    # -- table ---------------------------------------------------------------------------------

    def add(self, chunk_id: int, ts: int, pos: int, nrec: int, size: int, ctype: int,
            dlen: int, bloom: int, epoch: int, simple: bool = False) -> None:
        self.ids.append(chunk_id)
        self.ts.append(ts)
        self.pos.append(pos)
        self.nrec.append(nrec)
        self.csize.append(size)
        self.types.append(ctype)
        self.dlen.append(dlen)
        self.bloom.append(bloom)
        self.epochs.append(epoch)
        self.simple.append(simple)
        if not self.nchunks:
            self.first_ts = ts
            self.first_epoch = epoch
        self.nchunks += 1
        self.last_ts = ts
        self.last_epoch = epoch
        self.last_id = chunk_id
        self.size = pos + size

    def add_header(self, pos: int, h: Header) -> None:
        self.add(h.chunk_id, h.timestamp, pos, h.num_records, h.size, h.chunk_type,
                 h.data_length, h.bloom_size, h.epoch)

    def pop(self) -> None:
        for a in (self.ids, self.ts, self.pos, self.nrec, self.csize, self.types, self.dlen,
                  self.bloom, self.epochs, self.simple):
            a.pop()
        self.nchunks -= 1
        n = self.nchunks
        self.size = self.pos[-1] + self.csize[-1] if n else FILE_HEADER_SIZE
        self.last_ts = self.ts[-1] if n else 0
        self.last_epoch = self.epochs[-1] if n else 0
        self.first_epoch = self.first_epoch if n else 0
        self.last_id = self.ids[-1] if n else -1

    def locate(self, offset: int) -> int:
        """Index of the chunk holding ``offset`` (-1 if before the first chunk)."""
        return bisect_right(self.ids, offset) - 1

    def find_id(self, chunk_id: int) -> int:
        i = bisect_right(self.ids, chunk_id) - 1
        return i if i >= 0 and self.ids[i] == chunk_id else -1

    def next_user(self, i: int) -> int:
        """Index of the first user chunk at or after ``i``, -1 if none in this segment."""
        types, n = self.types, self.nchunks
        while i < n:
            if types[i] == CHUNK_USER:
                return i
            i += 1
        return -1

    def prev_user(self, i: int) -> int:
        types = self.types
        while i >= 0:
            if types[i] == CHUNK_USER:
                return i
            i -= 1
        return -1

    def ref(self, i: int) -> ChunkRef:
        if self.bloom[i] < 0:
            self.fill_header(i)
        return ChunkRef(self.ids[i], self.nrec[i], self.ts[i], self.types[i], self.id,
                        self.pos[i], self.csize[i], self.bloom[i], self.dlen[i],
                        self.epochs[i], bool(self.simple[i]))

    def fill_header(self, i: int, buf: bytes | memoryview | None = None, at: int = 0) -> None:
        """Cache bloom size and data length of chunk ``i`` from its header (read if not given)."""
        if buf is None:
            buf, at = os.pread(self.open_fd(), HEADER_SIZE, self.pos[i]), 0
        try:
            h = Header(buf, at)
        except (ValueError, struct.error):
            h = None
        if h is None or h.chunk_id != self.ids[i] or h.size != self.csize[i]:
            raise StorageError(f"{self.path}: chunk {self.ids[i]} not at {self.pos[i]} "
                               "as the index says")
        self.dlen[i] = h.data_length
        self.bloom[i] = h.bloom_size

    # -- files ---------------------------------------------------------------------------------

    def open_fd(self) -> int:
        """A descriptor to read the segment with: the append fd of the active segment, else
        one from the process's file cache (opened if the cache closed it). Use it at once: a
        later ``open_fd`` of another segment may close it."""
        fd = self.fd
        if fd >= 0:
            if self.cached:
                files.touch(self)
            return fd
        fd = files.open(self.path, os.O_RDONLY)
        self.fd, self.cached = fd, True
        files.add(self)
        return fd

    def drop_fd(self) -> None:
        """The file cache closes this segment's descriptor (it has forgotten it already)."""
        fd, self.fd, self.cached = self.fd, -1, False
        if fd >= 0:
            os.close(fd)

    def close(self) -> None:
        if self.cached:
            files.forget(self)
        self.drop_fd()

    def light_open(self) -> None:
        """Learn size, chunk count and first/last timestamps of an old segment from its first
        and last index records, checked against the last chunk's header (the last chunk must
        end the file); load the table by scanning the segment when the index is not right."""
        self.size = os.stat(self.path).st_size
        try:
            ifd = files.open(self.index_path, os.O_RDONLY)
        except FileNotFoundError:
            head, n, last = b"", 0, b""
        else:
            try:
                head = os.pread(ifd, FILE_HEADER_SIZE + INDEX_RECORD_SIZE, 0)
                n = (os.fstat(ifd).st_size - FILE_HEADER_SIZE) // INDEX_RECORD_SIZE
                last = os.pread(ifd, INDEX_RECORD_SIZE,
                                FILE_HEADER_SIZE + (n - 1) * INDEX_RECORD_SIZE) if n > 0 else b""
            finally:
                os.close(ifd)
        if n > 0 and head[:FILE_HEADER_SIZE] == INDEX_HEADER and len(last) == INDEX_RECORD_SIZE:
            first_rec = INDEX_RECORD.unpack_from(head, FILE_HEADER_SIZE)
            last_rec = INDEX_RECORD.unpack(last)
            if first_rec[0] == self.id and first_rec[3] == FILE_HEADER_SIZE:
                fd = files.open(self.path, os.O_RDONLY)
                try:
                    h = read_header(fd, last_rec[3], self.size)
                finally:
                    os.close(fd)
                if (h is not None and h.chunk_id == last_rec[0] and h.chunk_type == last_rec[4]
                        and h.epoch == last_rec[2] and last_rec[3] + h.size == self.size
                        and first_rec[2] <= last_rec[2]):
                    self.nchunks = n
                    self.first_ts, self.last_ts = first_rec[1], last_rec[1]
                    self.first_epoch, self.last_epoch = first_rec[2], last_rec[2]
                    self.last_id = last_rec[0]
                    return
        self.load(None)

    def load(self, end_id: int | None) -> None:
        """Build the table of an old (read-only) segment from its index, or by scanning the
        segment and rewriting the index when the index does not describe the file.
        ``end_id`` is the first chunk id of the next segment (None: unknown)."""
        size = os.stat(self.path).st_size
        records = read_index(self.index_path) or []
        usable = (
            bool(records) and end_id is not None
            and records[0][0] == self.id and records[0][3] == FILE_HEADER_SIZE
            and records[-1][3] < size and records[-1][0] < end_id
        )
        if usable:
            # the index must end exactly where the file does (a cut index would merge chunks)
            fd = files.open(self.path, os.O_RDONLY)
            try:
                h = read_header(fd, records[-1][3], size)
            finally:
                os.close(fd)
            usable = (h is not None and h.chunk_id == records[-1][0]
                      and h.epoch == records[-1][2] and records[-1][3] + h.size == size
                      and h.chunk_id + h.num_records == end_id)
        self.reset_table()
        if usable:
            n = len(records)
            self.ids = array("q", [r[0] for r in records])
            self.ts = array("q", [r[1] for r in records])
            self.pos = array("q", [r[3] for r in records])
            self.types = array("B", [r[4] for r in records])
            self.epochs = array("Q", [r[2] for r in records])
            ids, pos = self.ids, self.pos
            assert end_id is not None
            self.nrec = array("I", [ids[i + 1] - ids[i] for i in range(n - 1)])
            self.nrec.append(end_id - ids[-1])
            self.csize = array("q", [pos[i + 1] - pos[i] for i in range(n - 1)])
            self.csize.append(size - pos[-1])
            self.dlen = array("I", bytes(4 * n))
            self.bloom = array("h", [-1]) * n
            self.simple = array("B", bytes(n))
            self.nchunks, self.size = n, size
            self.first_ts, self.last_ts = self.ts[0], self.ts[-1]
            self.first_epoch, self.last_epoch = self.epochs[0], self.epochs[-1]
            self.last_id = ids[-1]
        else:
            fd = files.open(self.path, os.O_RDONLY)
            try:
                if os.pread(fd, FILE_HEADER_SIZE, 0) != SEGMENT_HEADER:
                    raise StorageError(f"{self.path}: not an Osiris segment")
                for pos_, h in scan_chunks(fd, FILE_HEADER_SIZE, self.id, size, False):
                    self.add_header(pos_, h)
            finally:
                os.close(fd)
            self.write_index()
        self.loaded = True

    def write_index(self) -> None:
        """Rewrite the index file from the table."""
        records = b"".join(
            INDEX_RECORD.pack(self.ids[i], self.ts[i], self.epochs[i], self.pos[i],
                              self.types[i])
            for i in range(self.nchunks)
        )
        tmp = self.index_path.with_suffix(".index.tmp")
        tmp.write_bytes(INDEX_HEADER + records)
        os.replace(tmp, self.index_path)

    def reset_table(self) -> None:
        for name in ("ids", "ts", "pos", "csize"):
            setattr(self, name, array("q"))
        self.nrec, self.dlen = array("I"), array("I")
        self.types, self.bloom = array("B"), array("h")
        self.epochs, self.simple = array("Q"), array("B")
        self.nchunks = 0
        self.size = FILE_HEADER_SIZE
        self.first_epoch = self.last_epoch = 0
        self.last_id = -1

    def remove_files(self) -> None:
        """Delete the segment, then its index (recovery deletes an index left without segment)."""
        self.close()
        for p in (self.path, self.index_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
