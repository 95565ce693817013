"""File names, file headers and the index record of the Osiris on-disk layout, and ChunkRef."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

EPOCH = 1  # the first epoch of a stream (and the only one of a stream that never changed leader)

FILE_HEADER_SIZE = 8
SEGMENT_HEADER = b"OSIL" + struct.pack(">I", 1)
INDEX_HEADER = b"OSII" + struct.pack(">I", 1)

# ChunkId u64, Timestamp i64, Epoch u64, FilePos u32, ChunkType u8 (29 bytes, no padding)
INDEX_RECORD = struct.Struct(">QqQIB")
INDEX_RECORD_SIZE = INDEX_RECORD.size

SEGMENT_SUFFIX = ".segment"
INDEX_SUFFIX = ".index"


def segment_name(first_chunk_id: int) -> str:
    return f"{first_chunk_id:020d}{SEGMENT_SUFFIX}"


def index_name(first_chunk_id: int) -> str:
    return f"{first_chunk_id:020d}{INDEX_SUFFIX}"


def parse_name(name: str, suffix: str) -> int | None:
    """The first chunk id of ``00000000000000001234.segment`` (or .index), None for other names."""
    if len(name) != 20 + len(suffix) or not name.endswith(suffix) or not name[:20].isdigit():
        return None
    return int(name[:20])


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """Where one stored chunk is and what its header says."""

    chunk_id: int  # first offset in the chunk
    num_records: int
    timestamp: int  # ms
    chunk_type: int
    segment: int  # id of the segment file (its first chunk id)
    pos: int  # byte position of the chunk header in the segment file
    size: int  # whole chunk size on disk (header+bloom+data+trailer)
    bloom_size: int
    data_length: int
    epoch: int = EPOCH  # the leader epoch the chunk was written in (header and index record)
    #: known to hold simple entries only (no sub-entry batch): its data section is a run of
    #: length-prefixed records as is. Known for the chunks this process appended; False for
    #: the others (recovered, or copied from a leader), whatever they hold. What the process
    #: knows of the chunk, not the chunk: refs compare without it
    simple: bool = field(default=False, compare=False)

    @property
    def next_offset(self) -> int:
        return self.chunk_id + self.num_records
