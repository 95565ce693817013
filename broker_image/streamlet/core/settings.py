"""A stream's settings: retention, segment size, bloom filter size (what a create decides)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class StreamSettings:
    max_age_ms: int | None = None
    max_length_bytes: int | None = None
    max_segment_size_bytes: int = 500_000_000
    filter_size: int = 16

    def to_json(self) -> dict[str, int | None]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, int | None]) -> StreamSettings:
        return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})  # type: ignore[arg-type]
