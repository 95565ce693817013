"""The Reactive Streams IO codec in memory: every message byte for byte (the examples of
docs/protocols/reactive-streams.md), varints, the splitter over any cut of the bytes and its
limit, malformed frames, publisher strings, and a fuzz of 100,000 random and mutated frames."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from streamlet.rsio import (
    Cancel,
    FramingLost,
    Goodbye,
    Hello,
    Malformed,
    Message,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Position,
    Request,
    RsioSplitter,
    Subscribe,
    Subscribed,
    decode,
    encode,
    iter_frames,
    varint,
)
from streamlet.rsio.codec import on_next_head, read_varint
from streamlet.rsio.publisher import BadPublisher, PublisherSpec, format_publisher, parse

# The examples of docs/protocols/reactive-streams.md, in its order.
EXAMPLES: list[tuple[str, Message]] = [
    ("04 01 00 01 01", Hello(0, (1,))),
    ("06 02 04 64 6f 6e 65", Goodbye("done")),
    ("0e 03 0a 65 76 3f 65 6e 64 3d 6e 6f 77 01 0a", Subscribe("ev?end=now", 1, 10)),
    ("04 04 01 ac 02", Request(1, 300)),
    ("02 05 01", Cancel(1)),
    ("03 06 01 00", Subscribed(1, 0)),
    ("03 06 02 04", Subscribed(2, 4)),
    ("07 07 01 68 65 6c 6c 6f", OnNext(1, b"hello")),
    ("02 08 01", OnComplete(1)),
    ("07 09 01 04 67 6f 6e 65", OnError(1, "gone")),
    ("0b 0a 02 02 00 00 00 07 00 00 00 08", OnNextPacked(2, 2, bytes.fromhex("0000000700000008"))),
    ("06 0b 01 2a 61 62 63", OnNextPart(1, 42, b"abc")),
    ("05 0c 01 2a 64 65", OnNextLastPart(1, 42, b"de")),
    ("04 20 01 e5 07", Position(1, 997)),
]


@pytest.mark.parametrize(("raw", "msg"), EXAMPLES, ids=[type(m).__name__ for _, m in EXAMPLES])
def test_every_message_byte_for_byte(raw: str, msg: Message) -> None:
    data = bytes.fromhex(raw)
    assert encode(msg) == data
    assert decode(data) == msg
    assert [bytes(f) for f in RsioSplitter().feed(data)] == [data]


def test_on_next_head_is_the_frame_before_its_element() -> None:
    for size in (0, 1, 120, 125, 126, 70_000):
        element = b"e" * size
        assert on_next_head(300, size) + element == encode(OnNext(300, element))


@pytest.mark.parametrize(("value", "raw"), [
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (16383, "ff7f"),
    (16384, "808001"), (2**64 - 1, "ffffffffffffffffff01"),
])
def test_varints_are_protobufs(value: int, raw: str) -> None:
    assert varint(value) == bytes.fromhex(raw)
    assert read_varint(bytes.fromhex(raw), 0, len(raw) // 2) == (value, len(raw) // 2)


@pytest.mark.parametrize("raw", ["ffffffffffffffffff02", "8080808080808080808001"])
def test_varints_past_64_bits_are_malformed(raw: str) -> None:
    with pytest.raises(Malformed):
        read_varint(bytes.fromhex(raw), 0, len(raw) // 2)


def test_a_varint_cut_short_is_not_known_yet() -> None:
    assert read_varint(b"\x80\x80", 0, 2) is None
    with pytest.raises(ValueError):
        varint(-1)
    with pytest.raises(ValueError):
        varint(2**64)


@pytest.mark.parametrize(("raw", "why"), [
    ("00", "varint"),  # an empty frame: no type
    ("01 63", "unknown message type 99"),
    ("03 05 01 00", "past the message's last field"),  # cancel with a byte too many
    ("02 04 01", "ends inside a varint"),  # request without its demand
    ("04 02 02 ff fe", "UTF-8"),
    ("04 02 09 61 62", "does not fit"),  # a string longer than its frame
    ("03 01 00 41", "extensions"),  # 65 extensions
    ("04 03 01 61 01", "ends inside a varint"),  # subscribe without its demand
])
def test_malformed_frames(raw: str, why: str) -> None:
    with pytest.raises(Malformed, match=why):
        decode(bytes.fromhex(raw))


def test_the_splitter_takes_any_cut_of_the_bytes() -> None:
    rng = random.Random(7)
    msgs = [m for _, m in EXAMPLES] + [OnNext(5, rng.randbytes(300)), OnNext(2**40, b"")]
    data = b"".join(encode(m) for m in msgs)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randrange(1, 30)))
        splitter = RsioSplitter()
        got = []
        for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
            got += [decode(f) for f in splitter.feed(data[a:b])]
        assert got == msgs


def test_a_frame_past_the_limit_loses_framing_before_it_is_buffered() -> None:
    splitter = RsioSplitter(max_size=100)
    ok = encode(OnNext(1, b"x" * 90))
    too_big = varint(200) + b"\x07\x01"  # only its head arrived
    frames = splitter.feed(ok + too_big)
    assert bytes(next(frames)) == ok
    with pytest.raises(FramingLost, match="exceeds the limit"):
        next(frames)
    with pytest.raises(FramingLost, match="not a varint"):
        list(RsioSplitter().feed(b"\xff" * 11))


def test_iter_frames_removes_what_it_yields() -> None:
    buf = bytearray(encode(Cancel(1)) + encode(OnComplete(2)) + b"\x05\x07")
    assert list(iter_frames(buf)) == [Cancel(1), OnComplete(2)]
    assert buf == b"\x05\x07"


# --- publisher strings -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "spec"), [
    ("ev", PublisherSpec("ev")),
    ("ev?offset=next", PublisherSpec("ev", ("next", 0))),
    ("ev?offset=last&end=now", PublisherSpec("ev", ("last", 0), "now")),
    ("ev?offset=42&end=100", PublisherSpec("ev", ("offset", 42), 100)),
    ("ev?offset=@1700000000000", PublisherSpec("ev", ("timestamp", 1700000000000))),
    ("ev?end=never&element_size=8", PublisherSpec("ev", element_size=8)),
    ("ev?mode=append&create=true", PublisherSpec("ev", append=True, create=True)),
    ("a%3Fb%26c?mode=read", PublisherSpec("a?b&c")),
    ("%E2%82%AC", PublisherSpec("\u20ac")),
])
def test_publisher_strings(text: str, spec: PublisherSpec) -> None:
    assert parse(text) == spec


@pytest.mark.parametrize(("text", "why"), [
    ("", "no stream"),
    ("?offset=1", "no stream"),
    ("ev?offset=-1", "non-negative"),
    ("ev?offset=1e3", "non-negative"),
    ("ev?offset=18446744073709551616", "64 bits"),
    ("ev?colour=red", "unknown option"),
    ("ev?offset=1&offset=2", "twice"),
    ("ev?element_size=65536", "at most"),
    ("ev?mode=write", "read or append"),
    ("ev?create=yes", "true or false"),
    ("ev?create=true", "mode=append"),
    ("ev?mode=append&offset=3", "mode=read"),
    ("ev?offset", "key=value"),
    ("%ff", "UTF-8"),
])
def test_bad_publisher_strings(text: str, why: str) -> None:
    with pytest.raises(BadPublisher, match=why):
        parse(text)


def test_format_publisher_round_trips() -> None:
    text = format_publisher("a?b&c/d", offset="@12", end=99, element_size=4)
    assert parse(text) == PublisherSpec("a?b&c/d", ("timestamp", 12), 99, 4)
    assert parse(format_publisher("x", mode="append", create=True)) == PublisherSpec(
        "x", append=True, create=True)


# --- fuzz ---------------------------------------------------------------------------------------

FUZZ_FRAMES = 100_000


def _random_message(rng: random.Random) -> Message:
    n = lambda: rng.choice([0, 1, 127, 128, rng.randrange(2**64)])  # noqa: E731
    makers: list[Callable[[], Message]] = [
        lambda: Hello(n(), tuple(n() for _ in range(rng.randrange(4)))),
        lambda: Goodbye(rng.choice(["", "bye", "\u20ac" * 3])),
        lambda: Subscribe(rng.choice(["ev", "ev?end=now", "x" * 300]), n(), n()),
        lambda: Request(n(), n()), lambda: Cancel(n()), lambda: Subscribed(n(), n()),
        lambda: OnNext(n(), rng.randbytes(rng.randrange(40))), lambda: OnComplete(n()),
        lambda: OnError(n(), "e"), lambda: OnNextPacked(n(), n(), rng.randbytes(16)),
        lambda: OnNextPart(n(), n(), rng.randbytes(8)),
        lambda: OnNextLastPart(n(), n(), b""), lambda: Position(n(), n()),
    ]
    return rng.choice(makers)()


def mutate(rng: random.Random, raw: bytes) -> bytes:
    b = bytearray(raw)
    how = rng.randrange(4)
    if how == 0:
        b[rng.randrange(len(b))] = rng.randrange(256)
    elif how == 1:
        del b[rng.randrange(1, len(b) + 1) - 1 :]
    elif how == 2:
        at = rng.randrange(len(b))
        b[at:at] = rng.randbytes(rng.randrange(1, 12))
    else:
        return rng.randbytes(rng.randrange(1, 40))
    return bytes(b)


@pytest.mark.slow  # 100,000 frames: make test runs it, make test-fast does not
def test_fuzz_decode_and_split() -> None:
    """Well-formed messages round-trip; mutated and random frames give Malformed (decode) or
    FramingLost (splitter), never another exception, never a wrong round trip."""
    rng = random.Random(20261123)
    ok = malformed = lost = 0
    for _ in range(FUZZ_FRAMES // 2):
        msg = _random_message(rng)
        raw = encode(msg)
        assert decode(raw) == msg
        ok += 1
        bad = mutate(rng, raw)
        try:
            frames = [bytes(f) for f in RsioSplitter(max_size=1 << 12).feed(bad)]
        except FramingLost:
            lost += 1
            continue
        for f in frames:
            try:
                decode(f)
            except Malformed:
                malformed += 1
    assert ok == FUZZ_FRAMES // 2
    assert malformed > 1000 and lost > 100  # the mutations reach both kinds of error
