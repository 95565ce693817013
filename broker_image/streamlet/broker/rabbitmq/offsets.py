"""RabbitMQ's offset specification (an offset type and a value, in Subscribe, ConsumerUpdate's
answer and ResolveOffsetSpec) as the core's neutral ``OffsetSpec``."""

from __future__ import annotations

from ...core.offsets import OffsetSpec, Start
from ...rabbitmq import OffsetType

_STARTS: dict[int, Start] = {OffsetType.FIRST: Start.FIRST, OffsetType.LAST: Start.LAST, OffsetType.NEXT: Start.NEXT,
           OffsetType.OFFSET: Start.OFFSET, OffsetType.TIMESTAMP: Start.TIMESTAMP}


def offset_spec(offset_type: int, value: int) -> OffsetSpec | None:
    """None for an offset type the protocol does not define."""
    start = _STARTS.get(offset_type)
    return None if start is None else OffsetSpec(start, value)
