"""The SBP codec (streamlet.sbp) against tables: frame layout byte by byte, what is discarded,
what is malformed, what loses framing, header round trips; and a fuzz of 100,000+ random and
mutated frames through the splitter, the decoder and the header reader (in process)."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from streamlet.sbp import (
    LAST,
    Flags,
    FramingLost,
    Malformed,
    Opcode,
    SbpSplitter,
    decode,
    encode,
    read,
    request_class,
    response_class,
    status,
    stream_id,
    system_error,
    write,
)
from streamlet.sbp.fbs.AppendInfo import AppendInfoT
from streamlet.sbp.fbs.AppendRequest import AppendRequestT
from streamlet.sbp.fbs.FetchInfo import FetchInfoT
from streamlet.sbp.fbs.FetchRequest import FetchRequestT
from streamlet.sbp.fbs.SystemErrorResponse import SystemErrorResponseT

FUZZ_FRAMES = 100_000


def test_a_ping_byte_by_byte() -> None:
    raw = encode(Opcode.PING, 0, 7, b"", b"hi")
    assert raw == bytes.fromhex("00000012" "17" "0001" "00" "00000007" "01" "000000") + b"hi"
    frame = decode(raw)
    assert frame is not None
    assert (frame.opcode, frame.flags, frame.stream_id) == (1, 0, 7)
    assert bytes(frame.header) == b"" and bytes(frame.payload) == b"hi"


@pytest.mark.parametrize(("flags", "response", "end", "system"), [
    (0, False, False, False),
    (Flags.RESPONSE, True, False, False),
    (LAST, True, True, False),
    (LAST | Flags.SYSTEM_ERROR, True, True, True),
    (0xF8, False, False, False),  # unused flags are ignored
])
def test_flags(flags: int, response: bool, end: bool, system: bool) -> None:
    frame = decode(encode(Opcode.PING, flags, 1))
    assert frame is not None
    assert (frame.is_response, frame.is_end, frame.is_system_error) == (response, end, system)


def _with(raw: bytes, at: int, value: bytes) -> bytes:
    return raw[:at] + value + raw[at + len(value):]


GOOD = encode(Opcode.HEARTBEAT, 0, 3, b"\x00" * 8, b"p")


@pytest.mark.parametrize(("raw", "outcome"), [
    (GOOD, "frame"),
    (_with(GOOD, 4, b"\x16"), "discard"),  # wrong magic
    (_with(GOOD, 5, b"\x00\x09"), "discard"),  # unknown opcode
    (_with(GOOD, 5, b"\x50\x01"), "discard"),
    (_with(GOOD, 12, b"\x02"), "malformed"),  # header format other than FlatBuffers
    (_with(GOOD, 13, b"\x00\x00\x0a"), "malformed"),  # header longer than the frame
    (_with(GOOD, 0, struct.pack(">I", 30)), "malformed"),  # length is not the frame's
])
def test_decode_outcomes(raw: bytes, outcome: str) -> None:
    if outcome == "malformed":
        with pytest.raises(Malformed):
            decode(raw)
        return
    got = decode(raw)
    assert (got is not None) == (outcome == "frame")


@pytest.mark.parametrize(("length", "limit", "lost"), [
    (16, 100, False), (100, 100, False), (101, 100, True), (15, 100, True), (0, 100, True),
    (1 << 31, 0, False),  # 0: no limit
])
def test_splitter_limits(length: int, limit: int, lost: bool) -> None:
    s = SbpSplitter(limit)
    raw = struct.pack(">I", length)
    if lost:
        with pytest.raises(FramingLost):
            list(s.feed(raw))
    else:
        assert list(s.feed(raw)) == [] and s.pending == length


def test_splitter_hands_out_whole_frames_across_reads() -> None:
    frames = [encode(Opcode.PING, 0, i, b"", bytes(i)) for i in range(20)]
    wire = b"".join(frames)
    s = SbpSplitter()
    got: list[bytes] = []
    at = 0
    rng = random.Random(1)
    while at < len(wire):
        n = rng.randrange(1, 40)
        got += [bytes(f) for f in s.feed(wire[at : at + n])]
        at += n
    assert got == frames


def test_headers_round_trip() -> None:
    req = AppendRequestT()
    req.timeoutMs = 1000
    infos = []
    for i in range(3):
        info = AppendInfoT()
        info.streamId, info.requestIndex, info.batchLength = stream_id(f"s{i}"), i, 10 * i
        infos.append(info)
    req.appendRequests = infos
    back = read(AppendRequestT, write(req))
    assert back.timeoutMs == 1000
    assert [(a.streamId, a.requestIndex, a.batchLength) for a in back.appendRequests] == [
        (stream_id(f"s{i}"), i, 10 * i) for i in range(3)]


def test_an_empty_header_reads_as_defaults() -> None:
    fetch = read(FetchRequestT, b"")
    assert (fetch.maxWaitMs, fetch.minBytes, fetch.fetchRequests) == (0, 0, None)


@pytest.mark.parametrize("bad", [b"\x01", b"\xff\xff\xff\xff", b"\x08\x00\x00\x00\x00\x00\x00\x00",
                                 b"\x04\x00\x00\x00\xf0\xff\xff\xff\x00\x00"])
def test_unreadable_headers_are_malformed(bad: bytes) -> None:
    with pytest.raises(Malformed):
        read(AppendRequestT, bad)


def test_system_error() -> None:
    got = read(SystemErrorResponseT, system_error(2, "bad"))
    assert (got.status.code, got.status.message) == (2, b"bad")


def test_every_opcode_has_its_headers() -> None:
    for op in Opcode:
        if op is Opcode.PING:
            assert request_class(op) is None  # a PONG echoes whatever came
            continue
        assert request_class(op) is not None and response_class(op) is not None
    assert request_class(0x7777) is None


@pytest.mark.parametrize(("name", "expected"), [
    ("a", stream_id("a")),  # stable: the same name, the same id
])
def test_stream_ids(name: str, expected: int) -> None:
    assert stream_id(name) == expected
    assert 0 <= stream_id(name) < 1 << 63
    assert stream_id("a") != stream_id("b")
    # the documented rule, so other clients can compute it
    import hashlib
    assert stream_id("orders") == int.from_bytes(
        hashlib.sha256(b"orders").digest()[:8], "big") & ((1 << 63) - 1)


def _random_frame(rng: random.Random) -> bytes:
    op = rng.choice(list(Opcode))
    header = b""
    if op is Opcode.APPEND:
        req = AppendRequestT()
        req.timeoutMs = rng.randrange(1 << 31)
        info = AppendInfoT()
        info.streamId, info.requestIndex, info.batchLength = rng.randrange(1 << 63), 0, 3
        req.appendRequests = [info]
        header = write(req)
    elif op is Opcode.FETCH:
        req2 = FetchRequestT()
        f = FetchInfoT()
        f.streamId, f.fetchOffset, f.batchMaxBytes = rng.randrange(1 << 63), rng.randrange(99), 5
        req2.fetchRequests = [f]
        header = write(req2)
    elif rng.random() < 0.5:
        header = rng.randbytes(rng.randrange(0, 40))
    return encode(op, rng.randrange(8), rng.randrange(1 << 31), header,
                  rng.randbytes(rng.randrange(0, 20)))


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    b = bytearray(raw)
    how = rng.randrange(4)
    if how == 0:
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif how == 1:
        at = rng.randrange(16, len(b) + 1)
        del b[at:]
        b[0:4] = struct.pack(">I", len(b))  # still framed: the damage is inside
    elif how == 2:
        at = rng.randrange(len(b))
        b[at:at] = rng.randbytes(rng.randrange(1, 12))
    else:
        return rng.randbytes(rng.randrange(1, 40))
    return bytes(b)


@pytest.mark.slow  # 100,000 frames: make test runs it, make test-fast does not
def test_fuzz_split_decode_read() -> None:
    """Random and mutated frames: the splitter cuts or says FramingLost, the decoder gives a
    frame, None (discard) or Malformed, the header reader a table or Malformed; nothing else
    escapes, and well-formed frames round-trip."""
    rng = random.Random(20261123)
    counts: dict[str, int] = {"ok": 0, "discard": 0, "malformed": 0, "lost": 0}
    for n in range(FUZZ_FRAMES):
        raw = _random_frame(rng)
        bad = n % 2 == 1
        if bad:
            raw = _mutate(rng, raw)
        try:
            frames = list(SbpSplitter(1 << 16).feed(raw))
        except FramingLost:
            counts["lost"] += 1
            continue
        for f in frames:
            try:
                frame = decode(f)
            except Malformed:
                counts["malformed"] += 1
                continue
            if frame is None:
                counts["discard"] += 1
                continue
            cls: Any = (response_class if frame.is_response else request_class)(frame.opcode)
            if cls is None:
                continue
            try:
                read(cls, frame.header)
            except Malformed:
                counts["malformed"] += 1
                continue
            counts["ok"] += 1
            if not bad:
                assert bytes(frame.payload) == raw[len(raw) - len(frame.payload):]
    assert sum(counts.values()) >= FUZZ_FRAMES * 0.9
    assert all(counts.values()), counts  # every outcome was reached


def test_status_helper() -> None:
    s = status(101, "no such stream")
    assert (s.code, s.message) == (101, "no such stream")
