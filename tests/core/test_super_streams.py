"""Virtual hosts and their super streams, in memory: names, the refusals of a create, the
order of partitions and record, repairs at start, routing. No socket, no broker process."""

from __future__ import annotations

import pytest

from streamlet.core.streams import valid_stream_name


@pytest.mark.parametrize("name, valid", [
    ("orders", True),
    ("with/slash and spaces", True),
    ("", False),
    ("amq.x", False),
    ("x" * 256, False),
    ("é" * 128, False),  # 256 bytes
    ("a\0b", False),
    ("a\nb", False),
])
def test_stream_names(name: str, valid: bool) -> None:
    assert (valid_stream_name(name) is None) == valid
