"""Settings of one stream's log (segment size, retention, durability)."""

from __future__ import annotations

from dataclasses import dataclass

FSYNC_MODES = ("never", "chunk", "interval")


@dataclass(frozen=True)
class LogConfig:
    max_segment_bytes: int = 500_000_000
    max_segment_chunks: int = 256_000
    max_bytes: int | None = None  # retention: keep the newest segments whose total fits
    max_age_ms: int | None = None  # retention: drop segments whose last chunk is older
    fsync: str = "never"  # "never" | "chunk" | "interval" (at most once per second, on append)
    filter_size: int = 16  # bloom filter bytes per chunk, for later
    max_writer_sequences: int = 255  # writers kept in a tracking snapshot (Osiris' default)

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {FSYNC_MODES}, not {self.fsync!r}")
        if self.max_segment_bytes < 1 or self.max_segment_chunks < 1:
            raise ValueError("segment limits must be positive")
        # the index stores a chunk's file position as u32
        if self.max_segment_bytes > 0xFFFFFFFF:
            raise ValueError("max_segment_bytes must fit in 32 bits")
        if not 16 <= self.filter_size <= 255:
            raise ValueError("filter_size must be 16..255")
