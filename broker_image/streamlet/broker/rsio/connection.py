"""One Reactive Streams IO connection (docs/protocols/reactive-streams.md): frames cut by
streamlet.rsio's splitter; the broker plays both roles over the streams of virtual host "/".

Hellos first (the broker's on connect, the client's as its first message); subscribe with a read
publisher string makes the broker publish within the subscriber's demand (``reading.Outbound``),
with mode=append it subscribes back and gives demand as elements become durable
(``appending.Inbound``). Goodbye ends everything; anything not of the protocol is answered with
goodbye and a close, disturbing no other connection or stored data. No authentication, every
right on "/"; idle only without a subscription.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...core.offsets import OffsetSpec, Start, resolve
from ...core.ports import Refusal
from ...core.registry import LimitReached, Streams
from ...core.streams import Publisher, Stream
from ...rsio import (
    EXT_OFFSETS,
    FRAME_OVERHEAD,
    VERSION,
    BadPublisher,
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
    PublisherSpec,
    Request,
    RsioSplitter,
    Subscribe,
    Subscribed,
    decode,
    encode,
    parse,
)
from ...rsio.runs import cut_on_next
from ...wire.framing import FrameTooLarge
from ..arguments import parse_create_arguments, valid_stream_name
from ..replication.members import Refused
from ..transport import FramedConnection
from .appending import Inbound, Violation
from .reading import Outbound
from .settings import RsioSettings

if TYPE_CHECKING:
    from ..server import Broker

log = logging.getLogger("streamlet.broker")

_STARTS = {"first": Start.FIRST, "last": Start.LAST, "next": Start.NEXT, "offset": Start.OFFSET,
           "timestamp": Start.TIMESTAMP}
#: The core's reasons for refusing an append, as onError text.
REFUSALS = {Refusal.GONE: "the stream was deleted",
            Refusal.MOVED: "the stream moved to another broker",
            Refusal.WRITE_FAILED: "the broker could not write to disk"}


class RsioConnection(FramedConnection):
    def __init__(self, broker: Broker, tls: bool = False) -> None:
        settings = broker.config.settings_of("rsio", RsioSettings)
        super().__init__(broker, tls, RsioSplitter(settings.max_element_bytes + FRAME_OVERHEAD))
        self.streams: Streams = broker.vhosts["/"].streams
        self.split_bytes = settings.split_bytes
        self.window = settings.window
        self.max_element = settings.max_element_bytes
        self.offsets = False  # the client's hello listed extension 1
        self.greeted = False  # the client's hello came
        self.said_goodbye = False
        #: the client's subscriptions to streams, by its subscriber id
        self.readers: dict[int, Outbound] = {}
        #: appends, by the client's subscriber id (the broker's subscription uses the same id)
        self.appends: dict[int, Inbound] = {}
        self.by_publisher: dict[int, Inbound] = {}  # core publisher id -> its append
        self.next_publisher = 0

    # --- the transport's hooks ---------------------------------------------------------------

    def accepted(self) -> None:
        self.opened = True  # no handshake to wait for: the frame deadline applies at once
        self.send(Hello(VERSION, (EXT_OFFSETS,)))  # the loose handshake: not waiting for theirs

    def handle_frame(self, frame: memoryview) -> None:
        # The usual frame of an append, an onNext of a one-byte subscriber id, held without a
        # message object; anything else (or a rule broken) goes the general way.
        # The onNext frames of the same subscriber that follow it in the read are cut in one
        # call (streamlet.rsio.runs).
        at = 1 if frame[0] < 0x80 else 2 if frame[1] < 0x80 else 3 if frame[2] < 0x80 else 0
        if at and len(frame) > at + 1 and frame[at] == 7 and frame[at + 1] < 0x80 and \
                self.greeted:
            inbound = self.appends.get(frame[at + 1])
            if inbound is not None and inbound.take(frame[at + 2 :]):
                room = inbound.granted - inbound.received
                if room:
                    entries, n, used = cut_on_next(self.reader.ahead(), inbound.id, room,
                                                   self.max_element)
                    if n:
                        inbound.take_entries(entries, n)
                        self.reader.skip(used)
                return
        try:
            msg = decode(frame)
        except Malformed as e:
            self.goodbye(f"malformed frame: {e}")
            return
        if not self.greeted:
            self.on_first(msg)
            return
        if type(msg) is not OnNext:
            self.frames_done()  # what came before is appended first
        handler = HANDLERS.get(type(msg))
        if handler is None:  # a second hello
            self.goodbye(f"unexpected {type(msg).__name__}")
            return
        try:
            handler(self, msg)
        except Exception:  # a bug costs this connection, never the broker
            log.exception("connection %s: RSIO %s failed", self.peer, type(msg).__name__)
            self.goodbye("internal error")

    def frames_done(self) -> None:
        for inbound in list(self.appends.values()):  # a flush refused ends its append
            if inbound.waiting:
                inbound.flush()

    def frame_too_large(self, error: FrameTooLarge) -> None:
        reason = error.reason if isinstance(error, FramingLost) else str(error)
        log.info("connection %s: %s, closing", self.peer, reason)
        self.goodbye(reason)

    def lost(self) -> None:
        self.frames_done()  # elements taken before are appended all the same
        for reader in self.readers.values():
            reader.done = True
            reader.stream.detach_reader(reader)
        for inbound in self.appends.values():
            inbound.stream.detach_publisher(inbound.publisher, confirm_first=False)
        self.readers.clear()
        self.appends.clear()
        self.by_publisher.clear()

    def writable(self) -> None:
        for reader in list(self.readers.values()):
            reader.pump()

    def busy(self) -> bool:
        return bool(self.readers or self.appends)  # a live subscription, either way

    def abort(self) -> None:
        """Close, saying goodbye first (the broker stops, or ends this connection)."""
        if self.greeted and not self.said_goodbye and not self.closing:
            self.said_goodbye = True
            self.send(Goodbye("the broker closes the connection"))
        super().abort()

    # --- sending ---------------------------------------------------------------------------------

    def send(self, msg: Message) -> None:
        self.write(encode(msg))

    def writelines(self, buffers: list[bytes | memoryview]) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.writelines(buffers)

    def goodbye(self, reason: str) -> None:
        """Say why, then close: everything this connection held is released (``lost``)."""
        if not self.said_goodbye:
            self.said_goodbye = True
            self.send(Goodbye(reason))
        self.abort()

    # --- the handshake ---------------------------------------------------------------------------

    def on_first(self, msg: Message) -> None:
        if not isinstance(msg, Hello):
            self.goodbye(f"the first message must be hello, not {type(msg).__name__}")
        elif msg.version != VERSION:
            self.goodbye(f"protocol version {msg.version} is not supported (this broker speaks {VERSION})")
        else:
            self.greeted = True
            self.offsets = EXT_OFFSETS in msg.extensions

    # --- readers (the broker publishes) ----------------------------------------------------------

    def reader_ended(self, reader: Outbound, error: str | None) -> None:
        reader.done = True
        reader.stream.detach_reader(reader)
        if self.readers.get(reader.id) is reader:
            del self.readers[reader.id]
        self.send(OnError(reader.id, error) if error is not None else OnComplete(reader.id))

    def refuse(self, sub: int, why: str) -> None:
        """A subscription that cannot start: subscribed, then onError (Reactive Streams rule
        1.9: the subscriber is told it is subscribed before any other signal)."""
        self.send(Subscribed(sub, 0))
        self.send(OnError(sub, why))

    def stream_for(self, spec: PublisherSpec) -> Stream | str:
        """The stream a publisher string names, or why not."""
        why = valid_stream_name(spec.stream)
        if why is not None:
            return why
        stream = self.streams.get(spec.stream)
        if stream is not None:
            return stream
        if not spec.create:
            return f"no stream {spec.stream!r}"
        try:
            return self.streams.create(spec.stream, parse_create_arguments(
                {}, self.broker.config.retention))
        except LimitReached as e:
            return f"cannot create {spec.stream!r}: {e}"
        except OSError as e:
            log.error("create %r failed: %s", spec.stream, e)
            return f"cannot create {spec.stream!r}: {e.strerror}"

    def start_reader(self, msg: Subscribe, spec: PublisherSpec, stream: Stream) -> None:
        start = resolve(stream, OffsetSpec(_STARTS[spec.start[0]], spec.start[1]))
        end = stream.commit_end if spec.end == "now" else spec.end
        assert not isinstance(end, str)
        reader = Outbound(self, self, msg.subscriber, stream, start, end, spec.element_size)
        self.readers[msg.subscriber] = reader
        stream.attach_reader(reader)
        self.send(Subscribed(msg.subscriber, spec.element_size))
        reader.request(msg.initial_demand)  # pumps: an end already reached completes at once

    # --- appends (the broker subscribes) ---------------------------------------------------------

    def start_append(self, msg: Subscribe, stream: Stream) -> None:
        try:
            elsewhere = self.broker.members.leader_of(stream) is not None
        except Refused:
            elsewhere = True
        if elsewhere or stream.sealed:  # only a stream's leader appends
            self.refuse(msg.subscriber, f"stream {stream.name!r} is not led by this broker")
            return
        self.next_publisher += 1
        pub = Publisher(self.next_publisher, None, stream, self)
        stream.attach_publisher(pub)
        inbound = Inbound(msg.subscriber, stream, pub, self.window, self.max_element)
        self.appends[msg.subscriber] = self.by_publisher[pub.id] = inbound
        self.send(Subscribed(msg.subscriber, 0))  # the client's subscription: how it ends
        self.send(Subscribe(msg.publisher, msg.subscriber, self.window))  # ours, to its publisher

    def end_append(self, inbound: Inbound, error: str | None, cancel: bool = False) -> None:
        """Forget the append; onComplete (every element durable) or onError on the client's
        subscription, after a cancel of ours when the client's publisher must stop."""
        inbound.flush()  # what arrived before is appended all the same
        self.appends.pop(inbound.id, None)
        self.by_publisher.pop(inbound.publisher.id, None)
        inbound.stream.detach_publisher(inbound.publisher, confirm_first=False)
        if cancel:
            self.send(Cancel(inbound.id))
        self.send(OnError(inbound.id, error) if error is not None else OnComplete(inbound.id))

    def append_step(self, sub: int, work: Callable[[Inbound], None]) -> None:
        """Run ``work`` on the append ``sub`` (an id the broker does not subscribe with any
        more: a signal that crossed our cancel, dropped); a violation ends the append."""
        inbound = self.appends.get(sub)
        if inbound is None:
            return
        try:
            work(inbound)
        except Violation as e:
            self.end_append(inbound, f"protocol violation: {e}", cancel=True)
            return
        if inbound.completing and inbound.durable and sub in self.appends:
            self.end_append(inbound, None)

    # --- the core's session roles (streamlet.core.ports): PublisherSession, Watcher --------------
    # (RSIO's readers write their own frames: no ReaderSession)

    def confirmed(self, publisher_id: int, ids: list[bytes]) -> None:
        inbound = self.by_publisher.get(publisher_id)
        if inbound is None:
            return
        more = inbound.confirm(sum(len(b) for b in ids) // 8)
        if more:
            self.send(Request(inbound.id, more))
        if inbound.completing and inbound.durable:
            self.end_append(inbound, None)

    def placed(self, publisher_id: int, first_id: int, offset: int) -> None:
        pass  # appends are not told their offsets

    def rejected(self, publisher_id: int, ids: list[int], why: Refusal) -> None:
        inbound = self.by_publisher.get(publisher_id)
        if inbound is not None:
            self.end_append(inbound, REFUSALS[why], cancel=True)

    def stream_gone(self, stream: Stream) -> None:
        self._drop(stream, f"stream {stream.name!r} was deleted")

    def stream_moved(self, stream: Stream) -> None:
        self._drop(stream, f"stream {stream.name!r} moved to another broker")

    def _drop(self, stream: Stream, why: str) -> None:
        for reader in [r for r in self.readers.values() if r.stream is stream]:
            reader.done = True
            self.reader_ended(reader, why)
        for inbound in [i for i in self.appends.values() if i.stream is stream]:
            self.end_append(inbound, why, cancel=True)


# --- the handlers: one per message type the client may send after its hello --------------------

def on_goodbye(conn: RsioConnection, msg: Goodbye) -> None:
    log.debug("connection %s: goodbye (%s)", conn.peer, msg.reason)
    conn.goodbye("goodbye")  # the acknowledgement; then the connection closes


def on_subscribe(conn: RsioConnection, msg: Subscribe) -> None:
    sub = msg.subscriber
    if sub in conn.readers or sub in conn.appends:
        # The subscriber must not reuse a live id: both subscriptions end, with one onError.
        old = conn.readers.get(sub)
        if old is not None:
            old.done = True
            old.stream.detach_reader(old)
            del conn.readers[sub]
        append = conn.appends.get(sub)
        if append is not None:
            conn.appends.pop(sub)
            conn.by_publisher.pop(append.publisher.id, None)
            append.stream.detach_publisher(append.publisher, confirm_first=False)
            conn.send(Cancel(sub))
        conn.send(OnError(sub, f"subscriber id {sub} is in use: both subscriptions end"))
        return
    try:
        spec = parse(msg.publisher)
    except BadPublisher as e:
        conn.refuse(sub, f"bad publisher string: {e}")
        return
    stream = conn.stream_for(spec)
    if isinstance(stream, str):
        conn.refuse(sub, stream)
    elif spec.append:
        conn.start_append(msg, stream)
    else:
        conn.start_reader(msg, spec, stream)


def on_request(conn: RsioConnection, msg: Request) -> None:
    reader = conn.readers.get(msg.subscriber)
    if reader is None:  # ended meanwhile, or an append's (which publishes nothing): a no-op
        return
    if msg.demand == 0:
        conn.reader_ended(reader, "request(0): demand must be positive (Reactive Streams rule 3.9)")
        return
    reader.request(msg.demand)


def on_cancel(conn: RsioConnection, msg: Cancel) -> None:
    reader = conn.readers.pop(msg.subscriber, None)
    if reader is not None:
        reader.done = True
        reader.stream.detach_reader(reader)
    inbound = conn.appends.pop(msg.subscriber, None)
    if inbound is not None:  # the client gives the append up: our subscription ends too
        conn.by_publisher.pop(inbound.publisher.id, None)
        inbound.stream.detach_publisher(inbound.publisher, confirm_first=False)
        conn.send(Cancel(msg.subscriber))


def on_subscribed(conn: RsioConnection, msg: Subscribed) -> None:
    def set_size(inbound: Inbound) -> None:
        inbound.element_size = msg.element_size
    conn.append_step(msg.subscriber, set_size)


def on_next(conn: RsioConnection, msg: OnNext) -> None:
    conn.append_step(msg.subscriber, lambda i: i.elements([msg.element]))


def on_next_packed(conn: RsioConnection, msg: OnNextPacked) -> None:
    conn.append_step(msg.subscriber, lambda i: i.packed(msg.count, msg.data))


def on_next_part(conn: RsioConnection, msg: OnNextPart | OnNextLastPart) -> None:
    last = isinstance(msg, OnNextLastPart)
    conn.append_step(msg.subscriber, lambda i: i.add_part(msg.element, msg.data, last))


def on_complete(conn: RsioConnection, msg: OnComplete) -> None:
    def complete(inbound: Inbound) -> None:
        if inbound.part is not None:
            raise Violation("onComplete inside a split element")
        inbound.completing = True
    conn.append_step(msg.subscriber, complete)


def on_error(conn: RsioConnection, msg: OnError) -> None:
    inbound = conn.appends.get(msg.subscriber)
    if inbound is not None:  # what arrived before is appended all the same
        conn.end_append(inbound, f"the publisher failed: {msg.error}")


def on_position(conn: RsioConnection, msg: Position) -> None:
    pass  # offsets of a client's publisher mean nothing to an append


HANDLERS: dict[type, Callable[[RsioConnection, Any], None]] = {
    Goodbye: on_goodbye, Subscribe: on_subscribe, Request: on_request, Cancel: on_cancel,
    Subscribed: on_subscribed, OnNext: on_next, OnNextPacked: on_next_packed,
    OnNextPart: on_next_part, OnNextLastPart: on_next_part, OnComplete: on_complete,
    OnError: on_error, Position: on_position,
}
