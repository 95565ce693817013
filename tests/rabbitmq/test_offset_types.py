"""RabbitMQ's offset types (Subscribe, ConsumerUpdate's answer, ResolveOffsetSpec) as the core's
neutral offset spec."""

from __future__ import annotations

import pytest

from streamlet.broker.rabbitmq.offsets import offset_spec
from streamlet.core.offsets import OffsetSpec, Start


@pytest.mark.parametrize("offset_type, value, spec", [
    (1, 7, OffsetSpec(Start.FIRST, 7)),
    (2, 0, OffsetSpec(Start.LAST)),
    (3, 0, OffsetSpec(Start.NEXT)),
    (4, 42, OffsetSpec(Start.OFFSET, 42)),
    (5, 1_700_000_000_000, OffsetSpec(Start.TIMESTAMP, 1_700_000_000_000)),
    (0, 0, None),
    (6, 0, None),
])
def test_rabbitmq_offset_types(offset_type: int, value: int, spec: OffsetSpec | None) -> None:
    assert offset_spec(offset_type, value) == spec
