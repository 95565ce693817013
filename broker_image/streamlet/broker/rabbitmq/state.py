"""What a RabbitMQ Stream connection holds, what every handler shares, and the core's session roles.

The handlers (handshake, publishing, consuming, streams, superstreams) are functions of this
state and a decoded command; they name no event loop (timers go through ``call_later``).
``connection.Connection`` adds the dispatch that runs them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ...core.ports import Refusal
from ...core.registry import Streams
from ...core.streams import Publisher, Stream
from ...core.subscription import SMALL_CHUNKS, Subscription
from ...rabbitmq import Code, FrameSplitter, machine
from ...rabbitmq import frames as f
from ...rabbitmq.answers import error_answer
from ...rabbitmq.constants import PRE_OPEN_FRAME_MAX, RESPONSE_FLAG
from ...rabbitmq.machine import Outcome, State
from ...rabbitmq.publish import deliver_prefix, encode_confirm
from ...storage.chunk import HEADER_SIZE
from ...wire.framing import FrameTooLarge
from ..transport import FramedConnection

if TYPE_CHECKING:
    from ...core.vhosts import VirtualHost
    from ...storage import ChunkRef
    from ..access import Kind
    from ..directory import Address
    from ..replication.leader import Leader
    from ..replication.relay import Relay
    from ..replication.sac_remote import RemoteMember
    from ..server import Broker

log = logging.getLogger("streamlet.broker")

#: The core's reasons for refusing a publish, as this protocol's codes.
REFUSAL_CODES = {Refusal.GONE: Code.STREAM_DOES_NOT_EXIST, Refusal.MOVED: Code.STREAM_NOT_AVAILABLE,
                 Refusal.WRITE_FAILED: Code.INTERNAL_ERROR}


class ConnectionState(FramedConnection):
    def __init__(self, broker: Broker, tls: bool = False) -> None:
        # Before Open frames are capped at 8192 bytes, as RabbitMQ does; Open raises the cap.
        super().__init__(broker, tls, FrameSplitter(PRE_OPEN_FRAME_MAX))
        self.vhost: VirtualHost | None = None
        self.client_properties: dict[str, str] = {}
        #: The handshake's progress, moved only by ``enter`` (streamlet.rabbitmq.machine's table);
        #: ``opened`` and ``closing`` mirror it, for the hot path and the core's ReaderSession.
        self.state = State.AUTHENTICATING
        #: the handshake's deadline until Open, then the heartbeat's
        self.timer: asyncio.TimerHandle | None = None
        self.frame_max = broker.config.frame_max
        self.heartbeat = broker.config.heartbeat
        self.deliver_v2 = False
        self.publishers: dict[int, Publisher] = {}
        #: ids of publishers dropped because their stream moved away: a late Publish gets code 6
        self.moved_publishers: set[int] = set()
        self.subscriptions: dict[int, Subscription] = {}
        #: ConsumerUpdate requests sent, by correlation id, waiting for the client's answer
        self.pending_updates: dict[int, tuple[Subscription, bool]] = {}
        self.watching: set[Stream] = set()
        self.corr = 0  # our requests' correlation ids
        #: a follower's link: the stream and member it follows, and the leader feeding it
        self.replica_of: tuple[Stream, int] | None = None
        self.feeding: Leader | None = None
        #: publishers on streams this broker follows, passed on to their leader (relay.py)
        self.relays: dict[Address, Relay] = {}
        self.relayed: dict[int, Relay] = {}
        #: a member's single-active-consumer link: its consumers, in groups decided here
        self.sac_link: RemoteMember | None = None

    # --- the handshake's state --------------------------------------------------------------------

    def enter(self, state: State) -> None:
        self.state = state
        self.opened = state is State.OPEN
        self.closing = state is State.CLOSED

    def outcome(self, outcome: Outcome) -> None:
        self.enter(machine.after(self.state, outcome))

    @property
    def streams(self) -> Streams:
        """This connection's virtual host's streams (handlers past Open only)."""
        assert self.vhost is not None
        return self.vhost.streams

    def missing(self, name: str) -> Code:
        """The code for a stream this broker does not hold: 6 (not available here) when the
        stream directory says another broker does, as RabbitMQ answers for a stream without a
        local member (clients look it up again), or when its files here were set aside at
        start (unreadable: Streams.unreadable), else 2 (does not exist)."""
        assert self.vhost is not None
        if self.vhost.streams.unreadable_reason(name) is not None:
            return Code.STREAM_NOT_AVAILABLE
        directory = self.broker.directory()
        known = directory.leader(self.vhost.name, name) is not None or directory.placement(
            self.vhost.name, name) is not None
        return Code.STREAM_NOT_AVAILABLE if known else Code.STREAM_DOES_NOT_EXIST

    def refused(self, kind: Kind, resource: str) -> bool:
        """True (and logged) if this connection's user may not ``kind`` the ``resource``."""
        assert self.user is not None and self.vhost is not None
        if self.broker.access.allowed(self.user, self.vhost.name, kind, resource):
            return False
        log.info("connection %s: user %s refused %s on %r in vhost %s", self.peer, self.user, kind,
                 resource, self.vhost.name)
        return True

    # --- writing, refusing, closing ------------------------------------------------------------------

    def send(self, cmd: f.Command) -> None:
        self.write(f.encode(cmd))

    def reject(self, key: int, version: int, corr: int | None, code: Code, reason: str,
               cmd: f.Command | None = None) -> None:
        """Answer a bad frame with its code (when it had a correlation id), in the layout of
        that request's response, then close."""
        log.info("connection %s: closing: %s (code %d)", self.peer, reason, code)
        if corr is not None and not key & RESPONSE_FLAG:
            self.write(error_answer(key & 0x7FFF, version, corr, code, cmd))
        self.fail(code, reason)

    def fail(self, code: Code, reason: str) -> None:
        """Tell the client why, and close the connection."""
        if self.closing:
            return
        self.corr += 1
        self.send(f.Close(self.corr, code, reason[:200]))
        self.abort()

    def frame_too_large(self, error: FrameTooLarge) -> None:
        self.fail(Code.FRAME_TOO_LARGE, str(error))

    def abort(self) -> None:
        self.outcome(Outcome.CLOSED)
        super().abort()

    def lost(self) -> None:
        self.outcome(Outcome.CLOSED)
        if self.timer:
            self.timer.cancel()
        for pub in self.publishers.values():
            pub.stream.detach_publisher(pub, confirm_first=False)  # nobody to confirm to
        for sub in list(self.subscriptions.values()):
            self.drop_subscription(sub)
        for stream in self.watching:
            stream.unwatch(self)
        self.watching.clear()
        if self.feeding is not None:
            self.feeding.detach(self)
            self.feeding = None
        if self.sac_link is not None:
            self.sac_link.close()
            self.sac_link = None
        self.publishers.clear()
        self.subscriptions.clear()
        self.pending_updates.clear()
        for relay in self.relays.values():
            self.spawn(relay.close(), "relay close")
        self.relays.clear()
        self.relayed.clear()

    def writable(self) -> None:
        for sub in list(self.subscriptions.values()):
            sub.pump()
        if self.feeding is not None and self.replica_of is not None:
            feed = self.feeding.feeds.get(self.replica_of[1])
            if feed is not None and feed.conn is self:
                feed.pump()

    # --- what the connection holds ---------------------------------------------------------------

    def drop_subscription(self, sub: Subscription) -> None:
        """Forget ``sub`` everywhere; a single active consumer hands over to the next in line."""
        self.subscriptions.pop(sub.id, None)
        sub.stream.detach_reader(sub)
        sub.active = False
        if sub.sac_key is not None and self.vhost is not None:
            self.vhost.sac.leave(sub)

    def drop_publishers(self, stream: Stream) -> list[int]:
        """Forget this connection's publishers on ``stream``; return their ids."""
        ids = [pid for pid, pub in self.publishers.items() if pub.stream is stream]
        for pid in ids:
            del self.publishers[pid]
        return ids

    def relay_dropped(self, ids: list[int], stream: str) -> None:
        """The leader no longer takes ``stream`` from these relayed publishers: as for a stream
        that moved away, the client is told and a late Publish gets code 6."""
        for pid in ids:
            self.relayed.pop(pid, None)
            self.moved_publishers.add(pid)
        if ids and not self.closing:
            self.send(f.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, stream))

    def relay_closed(self, relay: Relay) -> None:
        if self.relays.get(relay.leader) is relay:
            del self.relays[relay.leader]

    def send_publish_error(self, publisher_id: int, ids: list[int], code: Code) -> None:
        self.send(f.PublishError(publisher_id, [(i, code) for i in ids]))

    # --- the core's session roles (streamlet.core.ports): all three ------------------------------

    def confirmed(self, publisher_id: int, ids: list[bytes]) -> None:
        """``ids``: packed big-endian publishing ids, as PublishBatch carries them."""
        self.write(encode_confirm(publisher_id, ids))

    def placed(self, publisher_id: int, first_id: int, offset: int) -> None:
        """RabbitMQ's publishers are told nothing of offsets (never ``wants_offsets``)."""

    def rejected(self, publisher_id: int, ids: list[int], why: Refusal) -> None:
        self.send_publish_error(publisher_id, ids, REFUSAL_CODES[why])

    def deliver(self, sub_id: int, chunks: list[memoryview], committed: int) -> None:
        """Deliver frames for stored chunks (header + data as on disk), all in one writev."""
        if self.transport is None or self.transport.is_closing():
            return
        v2 = committed if self.deliver_v2 else None
        self.flush_file_rest()
        buffers: list[bytes | memoryview] = []
        for chunk in chunks:
            buffers.append(deliver_prefix(sub_id, len(chunk), v2))
            buffers.append(chunk)
        self.transport.writelines(buffers)
        if not self.tls:
            self.hold_if_buffered()

    def deliver_file(self, sub_id: int, fd: int, chunks: list[ChunkRef], committed: int) -> None:
        """Deliver frames for stored chunks without a bloom filter, from the segment file
        ``fd``. Over plain TCP a chunk of ``SMALL_CHUNKS`` or more (the size under which the
        subscription groups chunks) has its prefix written and its header and data sent with
        sendfile (``send_file``: a socket that fills pauses the
        connection, the chunk's rest still sent from the file). Smaller chunks, everything
        under TLS and behind bytes the transport holds, are read with one pread and written;
        if the socket leaves some of them in the transport, the connection pauses until it
        takes them (plain TCP), so the next chunks go from the file."""
        t = self.transport
        if t is None or t.is_closing():
            return
        v2 = committed if self.deliver_v2 else None
        for i, c in enumerate(chunks):
            n = HEADER_SIZE + c.data_length
            if n < SMALL_CHUNKS or not self.can_send_file():
                self._deliver_read(sub_id, fd, chunks[i:], v2)
                if not self.tls:
                    self.hold_if_buffered()
                return
            self.send_file(deliver_prefix(sub_id, n, v2), fd, c.pos, n)
            if t.is_closing():  # the connection broke
                return

    def _deliver_read(self, sub_id: int, fd: int, chunks: list[ChunkRef], v2: int | None) -> None:
        """``chunks`` (consecutive in the file ``fd``) read with one pread and written."""
        assert self.transport is not None
        self.flush_file_rest()
        first, last = chunks[0].pos, chunks[-1]
        span = last.pos + HEADER_SIZE + last.data_length - first
        read = self.read_exact(fd, span, first)
        if read is None:
            return
        data = memoryview(read)
        buffers: list[bytes | memoryview] = []
        for c in chunks:
            n, at = HEADER_SIZE + c.data_length, c.pos - first
            buffers.append(deliver_prefix(sub_id, n, v2))
            buffers.append(data[at : at + n])
        self.transport.writelines(buffers)

    def activate(self, sub: Subscription, active: bool) -> None:
        """Tell the client ``sub`` became active (it delivers once the client answers) or
        passive (it already stopped)."""
        self.corr += 1
        self.pending_updates[self.corr] = (sub, active)
        self.send(f.ConsumerUpdate(self.corr, sub.id, int(active)))
        self.call_later(self.broker.config.request_timeout, self._check_answered, self.corr)

    def _check_answered(self, corr: int) -> None:
        """A client that leaves a ConsumerUpdate unanswered is closed (as RabbitMQ does): its
        group would otherwise wait for it forever, a partition's messages going to nobody."""
        if corr in self.pending_updates and not self.closing:
            log.warning("connection %s: ConsumerUpdate %d unanswered for %ds, closing", self.peer,
                        corr, self.broker.config.request_timeout)
            self.abort()

    def stream_moved(self, stream: Stream) -> None:
        """``stream`` moved to another broker: its publishers here are gone; the client asks
        Metadata again (which names the new broker) and declares them there."""
        self.moved_publishers.update(self.drop_publishers(stream))
        self.send(f.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, stream.name))

    def stream_gone(self, stream: Stream) -> None:
        """The stream is gone: drop what this connection held on it and tell the client."""
        self.drop_publishers(stream)
        for sub in list(self.subscriptions.values()):
            if sub.stream is stream:
                self.drop_subscription(sub)
        stream.unwatch(self)
        self.watching.discard(stream)
        self.send(f.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, stream.name))

