"""The SBP client session (no I/O): bytes fed in, the frames and bytes out it gives."""

from __future__ import annotations

import pytest

from streamlet.sbp import LAST, Flags, FramingLost, Opcode, encode, write
from streamlet.sbp.fbs.GoAway import GoAwayT
from streamlet.sbp.headers import status
from streamlet.sbp.session import SbpSession


def _goaway(message: str) -> bytes:
    g = GoAwayT()
    g.status = status(0, message)
    return encode(Opcode.GOAWAY, Flags.NONE, 0, write(g))


def test_requests_get_stream_ids_of_their_own_and_the_codecs_bytes() -> None:
    s = SbpSession()
    assert s.request(Opcode.PING, None, b"hi") == (1, encode(Opcode.PING, Flags.NONE, 1, b"", b"hi"))
    assert s.request(Opcode.PING, b"\x01\x02", b"") == (2, encode(Opcode.PING, Flags.NONE, 2,
                                                                     b"\x01\x02", b""))
    g = GoAwayT()
    g.status = status(0, "x")
    assert s.request(Opcode.GOAWAY, g)[1] == encode(Opcode.GOAWAY, Flags.NONE, 3, write(g))


PIECES = [
    encode(Opcode.FETCH, Flags.RESPONSE, 2, b"", b"first part"),
    encode(Opcode.PING, LAST, 1, b"", b"pong"),
    encode(Opcode.PING, Flags.NONE, 7, b"", b"a request from the broker: dropped"),
    _goaway("bye"),
    encode(Opcode.FETCH, LAST, 2, b"", b"last part"),
]
STREAM = b"".join(PIECES)


@pytest.mark.parametrize("cuts", [
    [],
    list(range(1, len(STREAM))),  # a byte at a time
    [3, len(PIECES[0]), len(PIECES[0]) + 5, len(STREAM) - 1],
])
def test_response_frames_come_out_whole_in_arrival_order_however_cut(cuts: list[int]) -> None:
    s = SbpSession()
    got = []
    last = 0
    for cut in [*cuts, len(STREAM)]:
        got += s.receive(STREAM[last:cut])
        last = cut
    assert [(fr.stream_id, bytes(fr.payload), fr.is_end) for fr in got] == [
        (2, b"first part", False), (1, b"pong", True), (2, b"last part", True)]
    assert s.goaway == "bye"


def test_a_frame_with_another_magic_is_dropped_unanswered() -> None:
    s = SbpSession()
    frame = bytearray(encode(Opcode.PING, LAST, 1, b"", b"x"))
    frame[4] ^= 0xFF  # the magic
    assert s.receive(bytes(frame)) == []


def test_a_length_shorter_than_the_prefix_loses_the_framing() -> None:
    s = SbpSession()
    with pytest.raises(FramingLost):
        s.receive(b"\x00\x00\x00\x03abc")
