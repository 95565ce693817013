"""The one Publish frame builder: its frames decode as the general codec's Publish, v1 and v2."""

from __future__ import annotations

import pytest

from streamlet.core.batch import PublishBatch
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.publish import (
    MESSAGE_HEAD_SIZE,
    PUBLISH_HEAD_SIZE,
    parse_publish,
    publish_frame,
    set_publish_head,
)
from streamlet.storage.chunk import simple_entry

CASES = [
    # publisher id, [(publishing id, body)], filter values (None: v1)
    (7, [(41, b""), (42, b"a"), (43, b"x" * 300)], None),
    (0, [], None),
    (255, [(2**64 - 1, b"last")], None),
    (3, [(5, b"p"), (9, b"q"), (6, b"r")], ["eu", None, "ü"]),
    (1, [], []),
]


@pytest.mark.parametrize(("pid", "messages", "filters"), CASES)
def test_publish_frame_decodes_as_publish(pid: int, messages: list[tuple[int, bytes]],
                                          filters: list[str | None] | None) -> None:
    frame = publish_frame(pid, messages, filters)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    cmd = f.decode(memoryview(frame)[4:])
    assert isinstance(cmd, f.Publish)
    assert cmd.version == (1 if filters is None else 2)
    assert cmd.publisher_id == pid
    assert [(m.publishing_id, m.entry) for m in cmd.messages] == [
        (i, simple_entry(b)) for i, b in messages]
    assert [m.filter_value for m in cmd.messages] == (filters or [None] * len(messages))
    # the general encoder writes the same bytes
    general = f.Publish(pid, [f.PublishedMessage.simple(i, b, fv) for (i, b), fv in
                              zip(messages, filters or [None] * len(messages), strict=True)],
                        version=cmd.version)
    assert f.encode(general) == frame


def test_publish_frame_wants_a_filter_value_per_message() -> None:
    with pytest.raises(ValueError):
        publish_frame(1, [(1, b"a"), (2, b"b")], ["only one"])


def test_a_template_sends_its_first_messages() -> None:
    body = b"0123456789"
    template = bytearray(publish_frame(9, [(i, body) for i in range(5)]))
    end = PUBLISH_HEAD_SIZE + 3 * (MESSAGE_HEAD_SIZE + len(body))
    set_publish_head(template, end, 9, 3)
    batch = PublishBatch(*parse_publish(memoryview(template)[8:end], 1))
    assert (batch.publisher_id, batch.count, batch.first_id, batch.last_id) == (9, 3, 0, 2)
