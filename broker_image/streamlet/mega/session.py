"""The client's side of a MEGA connection with no I/O: requests in, bytes to write out; bytes
read in, the responses they complete out.

``request`` gives a request's bytes under the next correlation id and remembers its type (a
response's layout depends on it: a response does not say); ``receive`` takes what a read gave
and returns the responses it completed, in arrival order (PRODUCE answers come as messages
become durable, so out of request order), keeping an incomplete one for the next read. Bytes
no request explains raise ValueError (another protocol's port). streamlet.client.mega is the
asyncio shell around it (docs/protocols/mega.md).
"""

from __future__ import annotations

from .codec import MessageType, Response, encode_request, iter_responses


class MegaSession:
    __slots__ = ("_asked", "_buf", "_corr")

    def __init__(self) -> None:
        self._corr = 0
        self._asked: dict[int, MessageType] = {}  # correlation id -> the request's type
        self._buf = bytearray()  # the start of a response a read left incomplete

    @property
    def waiting(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._asked)

    def request(self, kind: MessageType, topic: str | bytes, timestamp: int = 0, *,
                payload: bytes | None = None, offset: int | None = None) -> tuple[int, bytes]:
        """(its correlation id, the bytes to send) of one request."""
        self._corr = corr = (self._corr + 1) & 0xFFFFFFFF
        self._asked[corr] = kind
        return corr, encode_request(corr, kind, topic, timestamp, payload=payload, offset=offset)

    def receive(self, data: bytes | bytearray | memoryview) -> list[Response]:
        """The responses ``data`` completed. ValueError when it is not MEGA's answer."""
        self._buf += data
        out = []
        asked = self._asked
        for response in iter_responses(self._buf, asked.get):
            asked.pop(response.correlation, None)
            out.append(response)
        return out
