"""A MEGA client (docs/protocols/mega.md), asyncio: create_topic, produce -> offset,
consume(offset) -> (timestamp, message). Requests may be in flight together (produce answers
come once the message is durable, so out of order); each waits for its correlation id.
produce_many and consume_many send a batch of requests in one write. The protocol is
streamlet.mega.session's (no I/O); this is the socket and the futures around it.

    async with await MegaClient.connect("127.0.0.1", 5553) as c:
        await c.create_topic("events")
        offset = await c.produce("events", b"hello")
        timestamp, body = await c.consume("events", offset)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from ..mega import ErrorCode, MessageType, Response
from ..mega.session import MegaSession
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
        self._session = MegaSession()
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self.start_reading()

    async def _read(self) -> None:
        error: BaseException = ConnectionError("the broker closed the connection")
        try:
            while data := await self.reader.read(1 << 16):
                for response in self._session.receive(data):
                    fut = self._pending.pop(response.correlation, None)
                    if fut is not None and not fut.done():
                        fut.set_result(response)
        except OSError as e:
            error = e
        except ValueError as e:  # not MEGA's answer: another protocol's port
            error = NotMega(str(e))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()

    def _ask(self, kind: MessageType, topic: str | bytes, now: int, *,
             payload: bytes | None = None,
             offset: int | None = None) -> tuple[bytes, asyncio.Future[Response]]:
        """A request's bytes, and the future its answer resolves."""
        if self._task.done():
            raise ConnectionError("the connection is closed")
        corr, data = self._session.request(kind, topic, now, payload=payload, offset=offset)
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        return data, fut

    async def request(self, kind: MessageType, topic: str | bytes, *, payload: bytes | None = None,
                      offset: int | None = None) -> Response:
        """Send one request and wait for its answer (MegaError for an error code)."""
        data, fut = self._ask(kind, topic, int(time.time() * 1000), payload=payload,
                              offset=offset)
        self.writer.write(data)
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
            data, fut = (self._ask(kind, topic, now, payload=item)
                         if isinstance(item, bytes | bytearray)
                         else self._ask(kind, topic, now, offset=item))
            futs.append(fut)
            out.append(data)
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
