"""A MEGA client (docs/protocols/mega.md), asyncio: create_topic, produce -> offset,
consume(offset) -> (timestamp, message). Requests may be in flight together (produce answers
come once the message is durable, so out of order); each waits for its correlation id.
produce_many and consume_many send a batch of requests in one write.

    async with await MegaClient.connect("127.0.0.1", 5553) as c:
        await c.create_topic("events")
        offset = await c.produce("events", b"hello")
        timestamp, body = await c.consume("events", offset)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from ..mega import ErrorCode, MessageType, Response, encode_request
from ..mega.codec import iter_responses
from .socket import SocketClient


class MegaError(Exception):
    """The broker answered a request with an error code."""

    def __init__(self, code: ErrorCode | int) -> None:
        name = code.name if isinstance(code, ErrorCode) else str(code)
        super().__init__(f"MEGA error {int(code)} ({name})")
        self.code = code


class NotMega(ConnectionError):
    """What came back is not a MEGA answer (the port is another protocol's)."""


class MegaClient(SocketClient):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self._corr = 0
        self._pending: dict[int, tuple[MessageType, asyncio.Future[Response]]] = {}
        self._buf = bytearray()
        self.start_reading()

    def _kind(self, correlation: int) -> MessageType | None:
        got = self._pending.get(correlation)
        return got[0] if got else None

    async def _read(self) -> None:
        error: BaseException = ConnectionError("the broker closed the connection")
        try:
            while data := await self.reader.read(1 << 16):
                self._buf += data
                for response in iter_responses(self._buf, self._kind):
                    got = self._pending.pop(response.correlation, None)
                    if got is not None and not got[1].done():
                        got[1].set_result(response)
        except OSError as e:
            error = e
        except ValueError as e:  # not MEGA's answer: another protocol's port
            error = NotMega(str(e))
        for _, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()

    def _register(self, kind: MessageType) -> tuple[int, asyncio.Future[Response]]:
        if self._task.done():
            raise ConnectionError("the connection is closed")
        self._corr = (self._corr + 1) & 0xFFFFFFFF
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[self._corr] = (kind, fut)
        return self._corr, fut

    async def request(self, kind: MessageType, topic: str | bytes, *, payload: bytes | None = None,
                      offset: int | None = None) -> Response:
        """Send one request and wait for its answer (MegaError for an error code)."""
        corr, fut = self._register(kind)
        self.writer.write(encode_request(corr, kind, topic, int(time.time() * 1000),
                                         payload=payload, offset=offset))
        response = await fut
        if not response.ok:
            raise MegaError(response.code)
        return response

    async def _pipelined(self, kind: MessageType, topic: str,
                         items: Iterable[bytes] | Iterable[int], check: bool = True
                         ) -> list[Response]:
        """One request per item, written together, their answers in the items' order: no task
        per request (what gathering ``request`` calls costs). With ``check``, MegaError for the
        first error, once every answer is in (the others may have succeeded: a produce is not
        undone)."""
        now = int(time.time() * 1000)
        futs, out = [], []
        for item in items:
            corr, fut = self._register(kind)
            futs.append(fut)
            out.append(encode_request(corr, kind, topic, now, payload=item, offset=None)
                       if isinstance(item, bytes | bytearray)
                       else encode_request(corr, kind, topic, now, offset=item))
        self.writer.write(b"".join(out))
        responses = list(await asyncio.gather(*futs))
        for response in responses if check else ():
            if not response.ok:
                raise MegaError(response.code)
        return responses

    async def produce_many(self, topic: str, messages: Iterable[bytes]) -> list[int]:
        """Produce every message at once (pipelined); their offsets, once all are durable.
        Send a bounded number per call: each is buffered until answered."""
        responses = await self._pipelined(MessageType.PRODUCE, topic, list(messages))
        return [r.offset for r in responses if r.offset is not None]

    async def consume_many(self, topic: str, offsets: Iterable[int]) -> list[tuple[int, bytes]]:
        """(timestamp, message) of each offset, asked for at once (pipelined)."""
        responses = await self._pipelined(MessageType.CONSUME, topic, list(offsets))
        return [(r.timestamp, r.message) for r in responses if r.message is not None]

    async def consume_run(self, topic: str, offset: int, n: int) -> list[tuple[int, bytes]]:
        """Up to ``n`` messages from ``offset`` on, (timestamp, message) each, asked for at once:
        those before the first error; MegaError when ``offset`` itself is answered with one
        (INVALID_OFFSET: not stored yet, or removed)."""
        responses = await self._pipelined(MessageType.CONSUME, topic,
                                          range(offset, offset + n), check=False)
        out = []
        for r in responses:
            if not r.ok or r.message is None:
                break
            out.append((r.timestamp, r.message))
        if not out and responses and not responses[0].ok:
            raise MegaError(responses[0].code)
        return out

    async def create_topic(self, topic: str) -> None:
        await self.request(MessageType.CREATE_TOPIC, topic)

    async def produce(self, topic: str, message: bytes) -> int:
        """The offset the message got, once the broker has it durably."""
        response = await self.request(MessageType.PRODUCE, topic, payload=message)
        assert response.offset is not None
        return response.offset

    async def consume(self, topic: str, offset: int) -> tuple[int, bytes]:
        """(the timestamp of the message's chunk, ms since the epoch; the message)."""
        response = await self.request(MessageType.CONSUME, topic, offset=offset)
        assert response.message is not None
        return response.timestamp, response.message
