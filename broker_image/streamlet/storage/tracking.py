"""Writer sequences and consumer offsets, recorded the way Osiris records them.

- A user chunk's trailer holds ``type 0 (sequence), IdLength u8, Id, Sequence u64`` per writer.
- A tracking delta chunk (type 1) holds one simple entry whose body is trailer-format records
  (``type 1 (offset), IdLength, Id, Offset u64`` for StoreOffset).
- A tracking snapshot chunk (type 2) holds one simple entry whose body is the whole state:
  ``0, IdLength, Id, ChunkId u64, Sequence u64`` per writer (ChunkId: the chunk that last
  stored that writer's sequence), ``1, IdLength, Id, Offset u64`` per consumer reference and
  ``2, IdLength, Id, Timestamp i64`` per timestamp reference.
"""

from __future__ import annotations

import struct

from streamlet.storage.chunk import (
    TRACKING_OFFSET,
    TRACKING_SEQUENCE,
    TRACKING_TIMESTAMP,
    ChunkError,
    decode_tracking,
    encode_tracking,
)

_SNAP_SEQUENCE = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_ID_HEAD = struct.Struct(">BB")


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


_trailer_prefix: dict[str, bytes] = {}  # writer -> "0, IdLength, Id": publishers are few


def encode_trailer(sequences: dict[str, int]) -> bytes:
    """A user chunk's trailer: one sequence record per writer."""
    parts = []
    for ref, seq in sequences.items():
        prefix = _trailer_prefix.get(ref)
        if prefix is None:
            prefix = encode_tracking(TRACKING_SEQUENCE, ref, 0)[:-8]  # validates the length
            if len(_trailer_prefix) >= 4096:
                _trailer_prefix.clear()
            _trailer_prefix[ref] = prefix
        parts.append(prefix + _U64.pack(seq))
    return b"".join(parts)


class Tracking:
    """The tracking state of a stream. ``sequences`` and ``offsets`` are the dicts StreamLog
    exposes as ``writer_sequences`` and ``offsets``; they are updated in place, never replaced."""

    __slots__ = ("offsets", "sequence_chunks", "sequences", "timestamps")

    def __init__(self) -> None:
        self.sequences: dict[str, int] = {}
        self.sequence_chunks: dict[str, int] = {}  # writer -> chunk id that last stored it
        self.offsets: dict[str, int] = {}
        self.timestamps: dict[str, int] = {}

    def is_empty(self) -> bool:
        return not (self.sequences or self.offsets or self.timestamps)

    def add_sequences(self, chunk_id: int, sequences: dict[str, int]) -> None:
        self.sequences.update(sequences)
        chunks = self.sequence_chunks
        for ref in sequences:
            chunks[ref] = chunk_id

    def apply_records(self, chunk_id: int, buf: bytes | memoryview) -> None:
        """Apply trailer-format records (a user chunk's trailer or a delta chunk's body)."""
        for kind, ident, value in decode_tracking(buf):
            if kind == TRACKING_SEQUENCE:
                self.sequences[ident] = value
                self.sequence_chunks[ident] = chunk_id
            elif kind == TRACKING_OFFSET:
                self.offsets[ident] = value
            elif kind == TRACKING_TIMESTAMP:
                self.timestamps[ident] = _signed64(value)
            else:
                raise ChunkError(f"unknown tracking type {kind}")

    def load_snapshot(self, buf: bytes | memoryview) -> None:
        """Replace the whole state with a snapshot chunk's body."""
        for d in (self.sequences, self.sequence_chunks, self.offsets, self.timestamps):
            d.clear()
        mv = memoryview(buf)
        pos, end = 0, len(mv)
        while pos < end:
            if end - pos < 2:
                raise ChunkError("truncated tracking snapshot")
            kind, n = _ID_HEAD.unpack_from(mv, pos)
            start = pos + 2 + n
            ident = bytes(mv[pos + 2 : start]).decode("utf-8", "replace")
            need = 16 if kind == TRACKING_SEQUENCE else 8
            if start + need > end:
                raise ChunkError("truncated tracking snapshot")
            if kind == TRACKING_SEQUENCE:
                chunk_id, seq = _SNAP_SEQUENCE.unpack_from(mv, start)
                self.sequences[ident] = seq
                self.sequence_chunks[ident] = chunk_id
            elif kind == TRACKING_OFFSET:
                self.offsets[ident] = _U64.unpack_from(mv, start)[0]
            elif kind == TRACKING_TIMESTAMP:
                self.timestamps[ident] = _I64.unpack_from(mv, start)[0]
            else:
                raise ChunkError(f"unknown tracking type {kind}")
            pos = start + need

    def snapshot(self, first_offset: int, first_timestamp: int, max_sequences: int) -> bytes:
        """Trim the state as Osiris does (offsets below the first offset and timestamps below
        the first timestamp are dropped, only the ``max_sequences`` most recently written
        writers are kept) and return the snapshot body."""
        for ref in [r for r, o in self.offsets.items() if o < first_offset]:
            del self.offsets[ref]
        for ref in [r for r, t in self.timestamps.items() if t < first_timestamp]:
            del self.timestamps[ref]
        if len(self.sequences) > max_sequences:
            by_age = sorted(self.sequences, key=lambda r: self.sequence_chunks.get(r, -1))
            for ref in by_age[: len(by_age) - max_sequences]:
                del self.sequences[ref]
                self.sequence_chunks.pop(ref, None)
        parts: list[bytes] = []
        for ref, seq in self.sequences.items():
            raw = ref.encode("utf-8")
            parts.append(_ID_HEAD.pack(TRACKING_SEQUENCE, len(raw)) + raw)
            parts.append(_SNAP_SEQUENCE.pack(self.sequence_chunks.get(ref, 0), seq))
        for ref, offset in self.offsets.items():
            parts.append(encode_tracking(TRACKING_OFFSET, ref, offset))
        for ref, ts in self.timestamps.items():
            raw = ref.encode("utf-8")
            parts.append(_ID_HEAD.pack(TRACKING_TIMESTAMP, len(raw)) + raw + _I64.pack(ts))
        return b"".join(parts)
