"""The MEGA codec in memory: request and response layouts byte for byte (the examples of
docs/protocols/mega.md), the splitter over any cut of the bytes, and its limits."""

from __future__ import annotations

import random

import pytest

from streamlet.mega import (
    ErrorCode,
    FramingLost,
    MegaSplitter,
    MessageType,
    Request,
    decode_request,
    decode_response,
    encode_error,
    encode_request,
    encode_success,
)
from streamlet.mega.codec import consumed, iter_responses, produced

# The examples of docs/protocols/mega.md.
CREATE = bytes.fromhex("00000007" "03" "00000002") + b"ev" + bytes.fromhex("0000019a2b3c4d5e")
PRODUCE = (bytes.fromhex("00000008" "01" "00000002") + b"ev" + bytes.fromhex("0000019a2b3c4d5e")
           + bytes.fromhex("00000005") + b"hello")
CONSUME = (bytes.fromhex("00000009" "02" "00000002") + b"ev" + bytes.fromhex("0000019a2b3c4d5e")
           + bytes.fromhex("0000002a"))
TS = 0x0000019A2B3C4D5E

REQUESTS = [
    (CREATE, Request(7, MessageType.CREATE_TOPIC, b"ev", TS)),
    (PRODUCE, Request(8, MessageType.PRODUCE, b"ev", TS, payload=b"hello")),
    (CONSUME, Request(9, MessageType.CONSUME, b"ev", TS, offset=42)),
]


@pytest.mark.parametrize(("raw", "request_"), REQUESTS)
def test_request_layouts(raw: bytes, request_: Request) -> None:
    assert decode_request(raw) == request_
    assert encode_request(request_.correlation, request_.type, request_.topic, TS,
                          payload=request_.payload, offset=request_.offset) == raw
    assert list(MegaSplitter().feed(raw)) == [raw]


def test_a_request_longer_than_its_layout_is_refused() -> None:
    with pytest.raises(ValueError):
        decode_request(CREATE + b"x")


@pytest.mark.parametrize(("raw", "kind", "expected"), [
    (encode_success(7, TS), MessageType.CREATE_TOPIC, (7, True, TS, None, None)),
    (encode_success(8, TS, produced(5)), MessageType.PRODUCE, (8, True, TS, 5, None)),
    (encode_success(9, TS, consumed(b"hello")), MessageType.CONSUME, (9, True, TS, None, b"hello")),
])
def test_success_layouts(raw: bytes, kind: MessageType, expected: tuple[object, ...]) -> None:
    got = decode_response(raw, lambda c: kind)
    assert got is not None
    r, size = got
    assert size == len(raw)
    assert (r.correlation, r.ok, r.timestamp, r.offset, r.message) == expected
    for cut in range(len(raw)):  # a part of it is not a response yet
        assert decode_response(raw[:cut], lambda c: kind) is None


def test_response_bytes() -> None:
    assert encode_success(8, TS, produced(5)) == bytes.fromhex(
        "00000008" "01" "0000019a2b3c4d5e" "0000000000000005")
    assert encode_success(9, TS, consumed(b"hello")) == bytes.fromhex(
        "00000009" "01" "0000019a2b3c4d5e" "00000005") + b"hello"
    assert encode_success(7, TS) == bytes.fromhex("00000007" "01" "0000019a2b3c4d5e")


@pytest.mark.parametrize("code", list(ErrorCode))
def test_error_layout(code: ErrorCode) -> None:
    raw = encode_error(0x01020304, code)
    assert raw == bytes([1, 2, 3, 4, 0, code])
    got = decode_response(raw, lambda c: None)
    assert got is not None and got[0].code == code and not got[0].ok


def test_the_nine_codes() -> None:
    assert {c.name: c.value for c in ErrorCode} == {
        "INVALID_REQUEST": 1, "INVALID_MESSAGE_TYPE": 2, "MESSAGE_TOO_LARGE": 3,
        "TOPIC_NOT_FOUND": 4, "TOPIC_ALREADY_EXISTS": 5, "INVALID_OFFSET": 6,
        "INTERNAL_ERROR": 7, "NETWORK_ERROR": 8, "RESOURCE_EXHAUSTED": 9}


def test_iter_responses_takes_whole_ones_only() -> None:
    kinds = {1: MessageType.PRODUCE, 2: MessageType.CONSUME}
    buf = bytearray(encode_success(1, TS, produced(3)) + encode_error(3, ErrorCode.INVALID_OFFSET)
                    + encode_success(2, TS, consumed(b"abc"))[:-1])
    got = list(iter_responses(buf, kinds.get))
    assert [(r.correlation, r.ok) for r in got] == [(1, True), (3, False)]
    assert len(buf) == 13 + 4 + 3 - 1  # the incomplete CONSUME answer stays


def _split(data: bytes, cuts: list[int], splitter: MegaSplitter) -> list[bytes]:
    out: list[bytes] = []
    last = 0
    for cut in [*cuts, len(data)]:
        out += [bytes(f) for f in splitter.feed(data[last:cut])]
        last = cut
    return out


def test_one_byte_at_a_time() -> None:
    data = CREATE + PRODUCE + CONSUME
    s = MegaSplitter()
    assert _split(data, list(range(1, len(data))), s) == [CREATE, PRODUCE, CONSUME]
    assert s.held == 0 and s.pending == 0


def test_any_cut_gives_the_same_requests() -> None:
    rng = random.Random(13)
    reqs = []
    for i in range(300):
        k = rng.choice([1, 2, 3])
        extra: dict[str, object] = ({"payload": rng.randbytes(rng.randrange(0, 300))} if k == 1
                                    else {"offset": i} if k == 2 else {})
        reqs.append(encode_request(i, k, b"t" * rng.randrange(0, 40), i, **extra))  # type: ignore[arg-type]
    data = b"".join(reqs)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randrange(1, 400)))
        assert _split(data, cuts, MegaSplitter()) == reqs


def test_held_pending_and_begun() -> None:
    s = MegaSplitter()
    assert list(s.feed(PRODUCE[:5])) == []
    assert (s.held, s.pending, s.begun) == (5, 0, 1)  # the length is not known yet
    assert list(s.feed(PRODUCE[5:25])) == []
    assert (s.held, s.pending, s.begun) == (25, len(PRODUCE), 1)
    assert list(s.feed(PRODUCE[25:] + CREATE[:3])) == [PRODUCE]
    assert (s.held, s.begun) == (3, 2)


def test_an_unknown_type_loses_framing() -> None:
    s = MegaSplitter()
    raw = encode_request(77, 9, b"ev", 0)
    with pytest.raises(FramingLost) as e:
        list(s.feed(CREATE + raw))
    assert (e.value.correlation, e.value.code) == (77, ErrorCode.INVALID_MESSAGE_TYPE)


def test_limits_are_checked_before_buffering() -> None:
    s = MegaSplitter(max_topic=10, max_payload=100)
    with pytest.raises(FramingLost) as e:  # only the header has come
        list(s.feed(encode_request(5, 1, b"x" * 11, 0)[:9]))
    assert (e.value.correlation, e.value.code) == (5, ErrorCode.MESSAGE_TOO_LARGE)
    s = MegaSplitter(max_topic=10, max_payload=100)
    head = encode_request(6, 1, b"ev", 0, payload=b"y" * 101)[:23]
    assert list(s.feed(head[:10])) == []
    with pytest.raises(FramingLost) as e:
        list(s.feed(head[10:]))
    assert (e.value.correlation, e.value.code, e.value.size) == (6, ErrorCode.MESSAGE_TOO_LARGE, 101)
    s = MegaSplitter(max_topic=10, max_payload=100)
    ok = encode_request(7, 1, b"x" * 10, 0, payload=b"y" * 100)
    assert list(s.feed(ok)) == [ok]
    assert s.max_size == 9 + 10 + 8 + 4 + 100


def test_random_bytes_never_raise_anything_but_framing_lost() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        s = MegaSplitter(max_topic=64, max_payload=256)
        data = rng.randbytes(rng.randrange(1, 200))
        try:
            for frame in s.feed(data):
                decode_request(frame)
        except FramingLost:
            pass
