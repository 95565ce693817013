"""The RSIO client session (no I/O): bytes fed in, the messages and bytes out it gives."""

from __future__ import annotations

import pytest

from streamlet.rsio import (
    EXT_OFFSETS,
    VERSION,
    Goodbye,
    Hello,
    Malformed,
    Message,
    OnComplete,
    OnNext,
    Position,
    Request,
    Subscribe,
    Subscribed,
    encode,
)
from streamlet.rsio.session import RsioSession

MESSAGES: list[Message] = [
    Hello(VERSION, (EXT_OFFSETS,)),
    Subscribed(1, 0),
    Position(1, 40),
    OnNext(1, b"first"),
    OnNext(200, b"a subscriber id of two bytes"),  # through the general decode
    OnNext(1, b""),
    Subscribe("s?mode=append", 2, 0),
    Request(2, 16),
    OnComplete(1),
    Goodbye("shutting down"),
]
STREAM = b"".join(encode(m) for m in MESSAGES) + encode(OnNext(1, b"after the goodbye"))


def test_what_it_sends_is_the_codecs() -> None:
    s = RsioSession()
    assert s.hello() == encode(Hello(VERSION, (EXT_OFFSETS,)))
    assert s.send(Request(3, 5)) == encode(Request(3, 5))
    assert [s.new_id(), s.new_id()] == [1, 2]
    assert s.goodbye("bye") == encode(Goodbye("bye")) and s.said_goodbye


@pytest.mark.parametrize("cuts", [
    [],
    list(range(1, len(STREAM))),  # a byte at a time
    [1, 7, 20, 33, 60],
])
def test_messages_come_out_in_order_however_cut_and_a_goodbye_is_answered(
        cuts: list[int]) -> None:
    s = RsioSession()
    got: list[Message] = []
    replies = b""
    last = 0
    for cut in [*cuts, len(STREAM)]:
        messages, reply = s.receive(STREAM[last:cut])
        got += messages
        replies += reply
        last = cut
    assert got == MESSAGES  # nothing after the goodbye
    assert s.ended and s.goodbye_reason == "shutting down"
    assert replies == encode(Goodbye("acknowledged"))


def test_a_goodbye_after_ours_is_not_answered() -> None:
    s = RsioSession()
    s.goodbye("client closing")
    assert s.receive(encode(Goodbye("acknowledged"))) == ([Goodbye("acknowledged")], b"")


def test_bytes_that_are_not_rsio_are_malformed() -> None:
    s = RsioSession()
    with pytest.raises(Malformed):
        s.receive(b"\x02\x7f\x00")  # a frame of an unknown type
