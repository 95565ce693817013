"""Where a subscription starts: the protocol's offset specification."""

from __future__ import annotations

from dataclasses import dataclass

from ..rabbitmq import OffsetType


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``type`` is an :class:`OffsetType`; ``value`` is the offset (OFFSET) or a time in
    milliseconds since the epoch (TIMESTAMP), else 0."""

    type: OffsetType
    value: int = 0

    @classmethod
    def first(cls) -> OffsetSpec:
        return cls(OffsetType.FIRST)

    @classmethod
    def last(cls) -> OffsetSpec:
        """The start of the last chunk (so possibly some records before the end)."""
        return cls(OffsetType.LAST)

    @classmethod
    def next(cls) -> OffsetSpec:
        """Only what is written after the subscription."""
        return cls(OffsetType.NEXT)

    @classmethod
    def offset(cls, offset: int) -> OffsetSpec:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        return cls(OffsetType.OFFSET, offset)

    @classmethod
    def timestamp(cls, ms: int) -> OffsetSpec:
        return cls(OffsetType.TIMESTAMP, ms)

    @classmethod
    def parse(cls, spec: OffsetSpec | str | int) -> OffsetSpec:
        """Accept an OffsetSpec, ``"first" | "last" | "next"``, or an int offset."""
        if isinstance(spec, OffsetSpec):
            return spec
        if isinstance(spec, bool):
            raise TypeError("an offset spec cannot be a bool")
        if isinstance(spec, int):
            return cls.offset(spec)
        if isinstance(spec, str):
            named = {"first": cls.first, "last": cls.last, "next": cls.next}.get(spec.lower())
            if named is None:
                raise ValueError(f"unknown offset spec {spec!r} (first, last, next or an int)")
            return named()
        raise TypeError(f"cannot use {type(spec).__name__} as an offset spec")
