"""The client's side of a Reactive Streams IO connection with no I/O: messages in, bytes to
write out; bytes read in, the messages they complete out.

``hello`` opens the connection (version 1 with the offsets extension); ``send`` encodes any
message; ``new_id`` numbers the subscribers of this side. ``receive`` takes what a read gave and
returns the messages it completed, in order, and the bytes to answer with: a goodbye from the
broker ends the connection (``ended``, its ``goodbye_reason``) and is acknowledged unless we
said goodbye first (``goodbye``). onNext, the bulk of what a reader gets, is cut out without
the general decode. Bytes that are not RSIO raise Malformed (a ValueError). The asyncio client,
streamlet.client.rsio, is the I/O and the subscriptions' queues around it.
"""

from __future__ import annotations

from .codec import (
    EXT_OFFSETS,
    VERSION,
    Goodbye,
    Hello,
    Message,
    OnNext,
    Type,
    decode,
    encode,
    read_varint,
)


class RsioSession:
    __slots__ = ("_buf", "_ids", "ended", "goodbye_reason", "said_goodbye")

    def __init__(self) -> None:
        self._buf = bytearray()  # the start of a frame a read left incomplete
        self._ids = 0
        self.said_goodbye = False
        self.ended = False
        #: the broker's goodbye reason, once it said goodbye
        self.goodbye_reason: str | None = None

    def hello(self) -> bytes:
        return encode(Hello(VERSION, (EXT_OFFSETS,)))

    def new_id(self) -> int:
        self._ids += 1
        return self._ids

    def send(self, msg: Message) -> bytes:
        return encode(msg)

    def goodbye(self, reason: str) -> bytes:
        self.said_goodbye = True
        return encode(Goodbye(reason))

    def receive(self, data: bytes | bytearray | memoryview) -> tuple[list[Message], bytes]:
        """(the messages ``data`` completed, the bytes to answer with). Nothing is taken after
        the broker's goodbye."""
        if self.ended:
            return [], b""
        buf = self._buf
        buf += data
        out: list[Message] = []
        reply = b""
        pos, end = 0, len(buf)
        try:
            while pos < end:
                got = read_varint(buf, pos, end)
                if got is None:
                    break
                size, at = got
                if end - at < size:
                    break
                if size >= 2 and buf[at] == Type.ON_NEXT and buf[at + 1] < 0x80:
                    out.append(OnNext(buf[at + 1], bytes(buf[at + 2 : at + size])))
                else:
                    msg = decode(bytes(buf[pos : at + size]))
                    out.append(msg)
                    if isinstance(msg, Goodbye):
                        self.ended = True
                        self.goodbye_reason = msg.reason
                        if not self.said_goodbye:
                            reply = encode(Goodbye("acknowledged"))
                        pos = end
                        break
                pos = at + size
        finally:
            del buf[:pos]
        return out, reply
