"""A Reactive Streams IO client (docs/protocols/reactive-streams.md), asyncio: subscribe to a
stream (an async iterator of elements, demand sent as they are taken) and publish into one
(elements sent within the broker's demand; returns once the broker says all are durable).
The protocol is streamlet.rsio.session's (no I/O); this is the socket and the subscriptions'
queues around it.

    async with await RsioClient.connect("127.0.0.1", 5554) as c:
        await c.publish("events", [b"a", b"b"], create=True)
        async for element in c.subscribe("events", offset="first", end="now"):
            print(element.offset, element.body)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Self

from ..rsio import (
    VERSION,
    Cancel,
    Goodbye,
    Hello,
    Message,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Position,
    Request,
    Subscribe,
    Subscribed,
    encode,
    format_publisher,
)
from ..rsio.session import RsioSession
from .socket import SocketClient

#: elements asked for at a time by a subscription (more once half of them were taken)
DEFAULT_DEMAND = 512
#: elements longer than this are sent as parts by publish
DEFAULT_SPLIT = 64 << 10


class RsioError(Exception):
    """onError from the broker (its text), or the connection ended (a goodbye's reason)."""


@dataclass(frozen=True, slots=True)
class Element:
    offset: int | None  # the stream's offset (extension 1, which this client asks for)
    body: bytes


_END = object()


class _Subscription:
    """One subscriber of ours: elements to a queue, terminal signals as its end."""

    def __init__(self, client: RsioClient, sub_id: int, demand: int) -> None:
        self.client = client
        self.id = sub_id
        self.demand = demand
        #: lists of elements (one per read from the socket), then _END
        self.queue: asyncio.Queue[list[Element] | object] = asyncio.Queue()
        self.batch: list[Element] = []  # elements of the read being handled
        self.element_size = 0
        self.subscribed = asyncio.get_running_loop().create_future()
        self.next_offset: int | None = None
        self.parts: dict[int, list[bytes]] = {}
        self.error: str | None = None
        self.taken = 0

    def handle(self, msg: Message) -> None:
        if isinstance(msg, Subscribed):
            self.element_size = msg.element_size
            if not self.subscribed.done():
                self.subscribed.set_result(None)
        elif isinstance(msg, Position):
            self.next_offset = msg.offset
        elif isinstance(msg, OnNext):
            self._element(msg.element)
        elif isinstance(msg, OnNextPacked):
            size = self.element_size or 1
            for i in range(0, len(msg.data), size):
                self._element(msg.data[i : i + size])
        elif isinstance(msg, OnNextPart | OnNextLastPart):
            self.parts.setdefault(msg.element, []).append(msg.data)
            if isinstance(msg, OnNextLastPart):
                self._element(b"".join(self.parts.pop(msg.element)))
        elif isinstance(msg, OnComplete | OnError):
            self.error = msg.error if isinstance(msg, OnError) else None
            self.end()

    def _element(self, body: bytes) -> None:
        self.batch.append(Element(self.next_offset, body))
        if self.next_offset is not None:
            self.next_offset += 1

    def flush(self) -> None:
        """Hand the elements of this read to the iterator (one queue item for all of them)."""
        if self.batch:
            self.queue.put_nowait(self.batch)
            self.batch = []

    def end(self) -> None:
        self.client._subs.pop(self.id, None)
        if not self.subscribed.done():
            self.subscribed.set_result(None)
        self.flush()
        self.queue.put_nowait(_END)

    def __aiter__(self) -> AsyncIterator[Element]:
        return self._iterate()

    async def _lists(self) -> AsyncIterator[list[Element]]:
        """The lists as they came, to the end (which raises the subscription's error)."""
        while True:
            item = await self.queue.get()
            if item is _END:
                if self.error is not None:
                    raise RsioError(self.error)
                return
            assert isinstance(item, list)
            yield item

    async def _iterate(self) -> AsyncIterator[Element]:
        try:
            async for item in self._lists():
                for element in item:
                    yield element
                    self._took(1)
        finally:
            self._leave()

    async def batches(self) -> AsyncIterator[list[Element]]:
        """The elements as they came, a list per read from the socket (demand is given back
        as each list is taken): for a reader that handles them in bulk."""
        try:
            async for item in self._lists():
                yield item
                self._took(len(item))
        finally:
            self._leave()

    def _took(self, n: int) -> None:
        self.taken += n
        if self.taken >= self.demand // 2 or self.demand == 1:
            self.client.send(Request(self.id, self.taken))
            self.taken = 0

    def _leave(self) -> None:
        if self.id in self.client._subs:  # left early: the broker stops
            self.client._subs.pop(self.id)
            with contextlib.suppress(RsioError):  # the connection is gone: nothing to stop
                self.client.send(Cancel(self.id))


class _Append:
    """One publish: our subscription to the broker's status for it (Subscribed, OnComplete,
    OnError) and the broker's subscription to our publisher (Subscribe, Request, Cancel)."""

    def __init__(self, sub_id: int) -> None:
        self.id = sub_id
        self.demand = 0
        self.changed = asyncio.Event()
        self.asked = False  # the broker's Subscribe came
        self.cancelled = False
        self.done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

    def handle(self, msg: Message) -> None:
        if isinstance(msg, Subscribe):
            self.asked = True
            self.demand += msg.initial_demand
        elif isinstance(msg, Request):
            self.demand += msg.demand
        elif isinstance(msg, Cancel):
            self.cancelled = True
        elif isinstance(msg, OnComplete | OnError) and not self.done.done():
            self.done.set_result(msg.error if isinstance(msg, OnError) else None)
        self.changed.set()


class RsioClient(SocketClient):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self._session = RsioSession()
        self._subs: dict[int, _Subscription | _Append] = {}
        self.hello: asyncio.Future[Hello] = asyncio.get_running_loop().create_future()
        self.goodbye_reason: str | None = None
        self.start_reading()

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float = 30.0) -> Self:
        """Connected once the broker's Hello came (RsioError when none came within
        ``timeout`` s, or the peer answered something else: not an RSIO listener)."""
        client = await super().connect(host, port)
        client.writer.write(client._session.hello())
        try:
            hello = await asyncio.wait_for(client.hello, timeout)
        except TimeoutError:
            await SocketClient.close(client)  # no goodbye: it never said hello
            raise RsioError(f"no Hello within {timeout:g} s") from None
        if hello.version != VERSION:
            await client.close()
            raise RsioError(f"the broker speaks version {hello.version}")
        return client

    def send(self, msg: Message) -> None:
        if self._task.done():
            raise RsioError(f"the connection is closed ({self.goodbye_reason or 'no goodbye'})")
        self.writer.write(self._session.send(msg))

    def new_id(self) -> int:
        return self._session.new_id()

    async def close(self) -> None:
        """Say goodbye, wait (briefly) for the broker's, and close."""
        if not self._task.done():
            bye = self._session.goodbye("client closing")
            with contextlib.suppress(OSError, RuntimeError):
                self.writer.write(bye)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._task), 5)
        self._task.cancel()
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(1 << 16):
                messages, reply = self._session.receive(data)
                subs = self._subs
                for msg in messages:
                    if isinstance(msg, Hello):
                        if not self.hello.done():
                            self.hello.set_result(msg)
                    elif not isinstance(msg, Goodbye):  # a goodbye is the last of them
                        sub = subs.get(msg.subscriber)
                        if sub is not None:
                            sub.handle(msg)
                for sub in subs.values():
                    if isinstance(sub, _Subscription):
                        sub.flush()
                if self._session.ended:
                    self.goodbye_reason = self._session.goodbye_reason
                    if reply:
                        with contextlib.suppress(OSError, RuntimeError):
                            self.writer.write(reply)
                    return
        except (OSError, ValueError) as e:
            self.goodbye_reason = self.goodbye_reason or str(e)
        finally:
            reason = self.goodbye_reason or "the broker closed the connection"
            if not self.hello.done():
                self.hello.set_exception(RsioError(reason))
            for sub in list(self._subs.values()):
                if isinstance(sub, _Subscription):
                    sub.error = sub.error or reason
                    sub.end()
                elif not sub.done.done():
                    sub.done.set_result(reason)
                    sub.changed.set()
            self._subs.clear()

    # --- reading ---------------------------------------------------------------------------------

    async def subscribe(self, stream: str, *, offset: str | int = "first",
                        end: str | int | None = None, element_size: int = 0,
                        demand: int = DEFAULT_DEMAND) -> _Subscription:
        """A subscription to ``stream`` (iterate it for Elements): from ``offset`` (first, last,
        next, an offset, "@<ms>"), until ``end`` (None: follow the stream; "now"; an offset)."""
        sub = _Subscription(self, self.new_id(), demand)
        self._subs[sub.id] = sub
        publisher = format_publisher(stream, offset=offset if offset != "first" else None,
                                     end=end, element_size=element_size or None)
        self.send(Subscribe(publisher, sub.id, demand))
        await sub.subscribed
        return sub

    async def read(self, stream: str, **options: object) -> list[Element]:
        """Every element of a bounded subscription (``end`` defaults to "now")."""
        options.setdefault("end", "now")
        sub = await self.subscribe(stream, **options)  # type: ignore[arg-type]
        return [e async for e in sub]

    # --- publishing ------------------------------------------------------------------------------

    async def publish(self, stream: str, bodies: Iterable[bytes], *, create: bool = False,
                      element_size: int = 0, split_bytes: int = DEFAULT_SPLIT) -> int:
        """Append ``bodies`` to ``stream``, each one message, within the broker's demand; returns
        how many once the broker says every one is durable (RsioError if it refused or
        failed). With ``element_size``, every body must have that size (sent packed)."""
        app = _Append(self.new_id())
        self._subs[app.id] = app
        self.send(Subscribe(format_publisher(stream, mode="append", create=create or None),
                            app.id, 0))
        while not app.asked and not app.done.done():
            app.changed.clear()
            await app.changed.wait()
        if app.done.done():
            raise RsioError(app.done.result() or "the append ended before it started")
        self.send(Subscribed(app.id, element_size))
        sent = 0
        batch: list[bytes] = []
        for body in bodies:
            while app.demand - len(batch) <= 0:
                self._flush(app, batch, element_size, split_bytes)
                batch = []
                await self.writer.drain()
                if app.cancelled or app.done.done():
                    break
                if app.demand <= 0:
                    app.changed.clear()
                    await app.changed.wait()
            if app.cancelled or app.done.done():
                break
            batch.append(body)
            sent += 1
            if len(batch) >= 256:
                self._flush(app, batch, element_size, split_bytes)
                batch = []
                await self.writer.drain()
        if not (app.cancelled or app.done.done()):
            self._flush(app, batch, element_size, split_bytes)
            self.send(OnComplete(app.id))
        error = await app.done
        self._subs.pop(app.id, None)
        if error is not None:
            raise RsioError(error)
        return sent

    def _flush(self, app: _Append, batch: list[bytes], element_size: int, split: int) -> None:
        if not batch:
            return
        app.demand -= len(batch)
        if element_size and len(batch) > 1:
            for i in range(0, len(batch), max(split // element_size, 1)):
                run = batch[i : i + max(split // element_size, 1)]
                self.writer.write(encode(OnNextPacked(app.id, len(run), b"".join(run))))
            return
        out = []
        for n, body in enumerate(batch):
            if len(body) <= split:
                out.append(encode(OnNext(app.id, body)))
                continue
            for at in range(0, len(body), split):
                kind = OnNextLastPart if at + split >= len(body) else OnNextPart
                out.append(encode(kind(app.id, n, body[at : at + split])))
        self.writer.write(b"".join(out))
