"""The MEGA client session (no I/O): bytes fed in, the responses and bytes out it gives."""

from __future__ import annotations

import pytest

from streamlet.mega import (
    ErrorCode,
    MessageType,
    Response,
    encode_error,
    encode_request,
    encode_success,
)
from streamlet.mega.codec import consumed, produced
from streamlet.mega.session import MegaSession

TS = 1_700_000_000_000


def _session_with(*kinds: MessageType) -> MegaSession:
    s = MegaSession()
    for kind in kinds:
        s.request(kind, "t", TS, payload=b"m" if kind == MessageType.PRODUCE else None,
                  offset=0 if kind == MessageType.CONSUME else None)
    return s


def test_requests_are_numbered_and_encoded_as_the_codec_does() -> None:
    s = MegaSession()
    assert s.request(MessageType.CREATE_TOPIC, "t", TS) == (
        1, encode_request(1, MessageType.CREATE_TOPIC, "t", TS))
    assert s.request(MessageType.PRODUCE, b"t", TS, payload=b"hi") == (
        2, encode_request(2, MessageType.PRODUCE, "t", TS, payload=b"hi"))
    assert s.request(MessageType.CONSUME, "t", TS, offset=7) == (
        3, encode_request(3, MessageType.CONSUME, "t", TS, offset=7))
    assert s.waiting == 3


ANSWERS = encode_success(2, TS, produced(41)) + encode_error(4, ErrorCode.INVALID_OFFSET) \
    + encode_success(1, TS) + encode_success(3, TS, consumed(b"abc"))
EXPECTED = [Response(2, True, TS, offset=41), Response(4, False, code=ErrorCode.INVALID_OFFSET),
            Response(1, True, TS), Response(3, True, TS, message=b"abc")]


@pytest.mark.parametrize("cuts", [
    [],  # one read
    list(range(1, len(ANSWERS))),  # a byte at a time
    [5, 6, 21, 25, 27, 40, 50],  # inside and between responses
])
def test_responses_come_out_whole_in_arrival_order_however_cut(cuts: list[int]) -> None:
    s = _session_with(MessageType.CREATE_TOPIC, MessageType.PRODUCE, MessageType.CONSUME,
                      MessageType.CONSUME)
    got: list[Response] = []
    last = 0
    for cut in [*cuts, len(ANSWERS)]:
        got += s.receive(ANSWERS[last:cut])
        last = cut
    assert got == EXPECTED
    assert s.waiting == 0


def test_an_answer_to_nothing_asked_is_not_mega() -> None:
    s = _session_with(MessageType.PRODUCE)
    with pytest.raises(ValueError, match="not asked"):
        s.receive(encode_success(9, TS, produced(1)))


@pytest.mark.parametrize(("data", "message"), [
    (b"HTTP/1.1 400 Bad Request\r\n", "response flag"),
    (b"\x00\x00\x00\x01\x07\x00", "response flag"),
])
def test_another_protocols_bytes_are_refused(data: bytes, message: str) -> None:
    s = _session_with(MessageType.PRODUCE)
    with pytest.raises(ValueError, match=message):
        s.receive(data)
