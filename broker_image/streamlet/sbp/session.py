"""The client's side of an SBP connection with no I/O: requests in, bytes to write out; bytes
read in, the frames they complete out.

``request`` gives a request frame's bytes under a stream identifier of its own (the next one:
requests are in flight together); ``receive`` takes what a read gave and returns the response
frames it completed, in arrival order, each under its request's identifier (an APPEND's or a
FETCH's answer may take several frames, the last with the response-end flag). A GOAWAY from
the broker is kept in ``goaway`` (why it ends the connection), not returned. Bytes that are
not SBP raise Malformed or ValueError. streamlet.client.sbp is the asyncio shell around it.
"""

from __future__ import annotations

from typing import Any

from .fbs.GoAway import GoAwayT
from .frame import Flags, Frame, Opcode, SbpSplitter, decode, encode
from .headers import read, text, write


class SbpSession:
    __slots__ = ("_sid", "_splitter", "goaway")

    def __init__(self) -> None:
        self._sid = 0
        self._splitter = SbpSplitter(0)
        #: the broker's GOAWAY message, once it came
        self.goaway: str | None = None

    def request(self, opcode: int, header: Any = None, payload: bytes = b"",
                flags: int = Flags.NONE) -> tuple[int, bytes]:
        """(its stream identifier, the bytes to send) of one request frame; ``header`` is a
        FlatBuffers table object, its bytes, or None."""
        self._sid = sid = (self._sid + 1) & 0x7FFFFFFF
        raw = header if isinstance(header, bytes) else b"" if header is None else write(header)
        return sid, encode(opcode, flags, sid, raw, payload)

    def receive(self, data: bytes | memoryview) -> list[Frame]:
        """The response frames ``data`` completed (requests the broker sends are not
        answered by a client: a GOAWAY sets ``goaway``, others are dropped)."""
        out = []
        for raw in self._splitter.feed(data):
            frame = decode(bytes(raw))
            if frame is None:
                continue
            if frame.opcode == Opcode.GOAWAY and not frame.is_response:
                self.goaway = text(read(GoAwayT, frame.header).status.message)
            elif frame.is_response:
                out.append(frame)
        return out
