"""One client connection: framing, the handshake (its order is streamlet.rabbitmq.machine's table),
and command dispatch.

Handshake: PeerProperties, SaslHandshake, SaslAuthenticate, Tune (server first, client echoes),
Open. Before Open only those (and Close, Heartbeat) are allowed, and frames are capped at 8192
bytes as RabbitMQ does; after it, those five are refused (code 13). A malformed or unknown frame
gets the protocol's code and the connection is closed; it never disturbs another connection.

A frame that arrives in pieces costs memory until it is whole, so it is bounded three ways: by
``frame_limit`` for one frame, by the broker's FrameBudget for all of them together (the
connection stops being read while its frame does not fit), and by ``frame_timeout`` from its
first byte (a peer trickling bytes is closed).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..core.ports import Refusal
from ..core.streams import LimitReached, Publisher, Stream, StreamManager
from ..core.subscription import Subscription
from ..core.superstreams import Denial, SuperStreamRefused
from ..protocol import Code, FrameSplitter, FrameTooLarge, Key, OffsetType
from ..protocol import frames as f
from ..protocol.constants import NO_LEADER, PRE_OPEN_FRAME_MAX, RESPONSE_FLAG
from ..protocol.publish import deliver_prefix, encode_confirm, parse_publish
from ..protocol.wire import Malformed
from ..rabbitmq import machine
from ..rabbitmq.machine import Outcome, Refuse, State
from .access import Kind
from .arguments import parse_create_arguments, valid_stream_name
from .auth import MECHANISMS, authenticate_plain
from .config import ConfigError
from .directory import Address, answer_metadata
from .filtering import matcher_from
from .offsets import resolve_start
from .tls import peer_common_name

if TYPE_CHECKING:
    from ..core.vhosts import VirtualHost
    from .server import Broker

log = logging.getLogger("streamlet.broker")

_ERROR_RESPONSE = struct.Struct(">IHHIH")
#: Error answers for the requests whose response carries more than a code: that response with
#: the code and its other fields empty or zero, so that any decoder reads it (the generic
#: correlation-id-and-code body would be a truncated frame for these).
_ERROR_ANSWERS: dict[int, Callable[[int, Code], f.Command]] = {
    Key.QUERY_PUBLISHER_SEQUENCE: lambda c, code: f.QueryPublisherSequenceResponse(c, code, 0),
    Key.QUERY_OFFSET: lambda c, code: f.QueryOffsetResponse(c, code, 0),
    Key.PEER_PROPERTIES: lambda c, code: f.PeerPropertiesResponse(c, code, {}),
    Key.SASL_HANDSHAKE: lambda c, code: f.SaslHandshakeResponse(c, code, []),
    Key.SASL_AUTHENTICATE: lambda c, code: f.SaslAuthenticateResponse(c, code, None),
    Key.OPEN: lambda c, code: f.OpenResponse(c, code, {}),
    Key.ROUTE: lambda c, code: f.RouteResponse(c, code, []),
    Key.PARTITIONS: lambda c, code: f.PartitionsResponse(c, code, []),
    Key.EXCHANGE_COMMAND_VERSIONS: lambda c, code: f.ExchangeCommandVersionsResponse(c, code, []),
    Key.STREAM_STATS: lambda c, code: f.StreamStatsResponse(c, code, {}),
    Key.RESOLVE_OFFSET_SPEC: lambda c, code: f.ResolveOffsetSpecResponse(c, code, 0, 0),
}


def error_answer(key: int, version: int, corr: int, code: Code, cmd: object = None) -> bytes:
    """The frame answering request ``key`` with ``code``, in that request's response layout.
    Metadata has no top-level code (RabbitMQ gives each stream its own): no brokers, and each
    stream asked about (when the request could be read) with ``code`` and no leader."""
    if key == Key.METADATA:
        streams = cmd.streams if isinstance(cmd, f.Metadata) else []
        return f.encode(f.MetadataResponse(
            corr, [], [f.StreamMetadata(s, code, NO_LEADER, []) for s in streams]))
    make = _ERROR_ANSWERS.get(key)
    if make is not None:
        return f.encode(make(corr, code))
    return _ERROR_RESPONSE.pack(10, key | RESPONSE_FLAG, version or 1, corr, code)


#: The core's reasons for refusing a publish, as this protocol's codes.
_REFUSAL_CODES = {Refusal.GONE: Code.STREAM_DOES_NOT_EXIST, Refusal.MOVED: Code.STREAM_NOT_AVAILABLE,
                  Refusal.WRITE_FAILED: Code.INTERNAL_ERROR}
_DENIAL_CODES = {Denial.INVALID: Code.PRECONDITION_FAILED, Denial.EXISTS: Code.STREAM_ALREADY_EXISTS,
                 Denial.LIMIT: Code.PRECONDITION_FAILED, Denial.FAILED: Code.INTERNAL_ERROR}
#: The version RabbitMQ clients check to enable features (3.13 semantics: v2 frames, filters).
ANNOUNCED_VERSION = "3.13.0"
#: Past this many bytes buffered for a peer that does not read, deliveries stop and the peer is
#: not read either (so a publisher ignoring its confirms is held back by TCP); below WRITE_LOW
#: both resume. The kernel's socket buffer, not this one, is what keeps a reading consumer fed.
WRITE_HIGH = 2 << 20
WRITE_LOW = 512 << 10
#: How long a connection refused at Open stays up for the client to close it.
OPEN_REFUSED_LINGER_S = 2.0

#: What we advertise in ExchangeCommandVersions, in RabbitMQ's order (rstream reads by position).
COMMAND_VERSIONS = [f.CommandVersion(k, 1, 2 if k == Key.PUBLISH else 1) for k in (
    Key.DECLARE_PUBLISHER, Key.PUBLISH, Key.QUERY_PUBLISHER_SEQUENCE, Key.DELETE_PUBLISHER,
    Key.SUBSCRIBE, Key.CREDIT, Key.STORE_OFFSET, Key.QUERY_OFFSET, Key.UNSUBSCRIBE, Key.CREATE,
    Key.DELETE, Key.METADATA, Key.CLOSE, Key.HEARTBEAT, Key.ROUTE, Key.PARTITIONS,
    Key.STREAM_STATS, Key.CREATE_SUPER_STREAM, Key.DELETE_SUPER_STREAM, Key.RESOLVE_OFFSET_SPEC,
)]


class Connection(asyncio.Protocol):
    def __init__(self, broker: Broker, tls: bool = False) -> None:
        self.broker = broker
        self.tls = tls
        self.vhost: VirtualHost | None = None
        #: ConsumerUpdate requests sent, by correlation id, waiting for the client's answer
        self.pending_updates: dict[int, tuple[Subscription, bool]] = {}
        self.watching: set[Stream] = set()
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.splitter = FrameSplitter(PRE_OPEN_FRAME_MAX)
        self.client_properties: dict[str, str] = {}
        self.user: str | None = None  # once authenticated
        #: The handshake's progress, moved only by ``_enter`` (streamlet.rabbitmq.machine's table);
        #: ``opened`` and ``closing`` mirror it, for the hot path and the core's Session port.
        self.state = State.AUTHENTICATING
        self.opened = False
        self.closing = False
        self.paused = False  # the peer does not read what we write
        self._waiting = False  # for FrameBudget space for the incomplete frame
        self._reading = True
        self._reserved = 0  # FrameBudget bytes held for the incomplete frame
        self._begun = 0  # the splitter's count when the incomplete frame began
        self._frame_deadline: asyncio.TimerHandle | None = None
        self._buffered_at_tick = 0  # the write buffer at the last heartbeat tick
        self.frame_max = broker.config.frame_max
        self.heartbeat = broker.config.heartbeat
        self.deliver_v2 = False
        self.publishers: dict[int, Publisher] = {}
        #: ids of publishers dropped because their stream moved away: a late Publish gets code 6
        self.moved_publishers: set[int] = set()
        self.subscriptions: dict[int, Subscription] = {}
        self.last_received = time.monotonic()
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._corr = 0

    def _enter(self, state: State) -> None:
        self.state = state
        self.opened = state is State.OPEN
        self.closing = state is State.CLOSED

    def _outcome(self, outcome: Outcome) -> None:
        self._enter(machine.after(self.state, outcome))

    @property
    def streams(self) -> StreamManager:
        """This connection's virtual host's streams (handlers past Open only)."""
        assert self.vhost is not None
        return self.vhost.streams

    def refused(self, kind: Kind, resource: str) -> bool:
        """True (and logged) if this connection's user may not ``kind`` the ``resource``."""
        assert self.user is not None and self.vhost is not None
        if self.broker.access.allowed(self.user, self.vhost.name, kind, resource):
            return False
        log.info("connection %s: user %s refused %s on %r in vhost %s", self.peer, self.user, kind,
                 resource, self.vhost.name)
        return True

    # --- transport callbacks ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = t = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        t.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        limit = self.broker.config.max_connections
        if limit and len(self.broker.connections) >= limit:
            log.warning("connection %s refused: the broker has %d connections (limit)", self.peer, limit)
            self._outcome(Outcome.CLOSED)
            t.close()
            return
        self.broker.connections.add(self)
        if self.broker.config.handshake_timeout:  # a peer that never opens is closed
            self._heartbeat_handle = asyncio.get_running_loop().call_later(
                self.broker.config.handshake_timeout, self._on_handshake_timeout)

    def _on_handshake_timeout(self) -> None:
        if not self.opened and not self.closing:
            log.info("connection %s: no Open within %ds, closing", self.peer,
                     self.broker.config.handshake_timeout)
            self.fail(Code.ACCESS_REFUSED, "handshake timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        self._outcome(Outcome.CLOSED)
        if self._heartbeat_handle:
            self._heartbeat_handle.cancel()
        self.broker.connections.discard(self)
        self.broker.closed_connections += 1
        self._release_frame()
        if self._waiting:
            self.broker.frame_budget.cancel(self)
        self.splitter = FrameSplitter(PRE_OPEN_FRAME_MAX)  # frees a partial frame now
        for pub in self.publishers.values():
            pub.stream.detach_publisher(pub, confirm_first=False)  # nobody to confirm to
        for sub in list(self.subscriptions.values()):
            self.drop_subscription(sub)
        for stream in self.watching:
            stream.unwatch(self)
        self.watching.clear()
        self.publishers.clear()
        self.subscriptions.clear()
        self.pending_updates.clear()

    def drop_subscription(self, sub: Subscription) -> None:
        """Forget ``sub`` everywhere; a single active consumer hands over to the next in line."""
        self.subscriptions.pop(sub.id, None)
        sub.stream.detach_reader(sub)
        sub.active = False
        if sub.sac_key is not None and self.vhost is not None:
            self.vhost.sac.leave(sub)

    def pause_writing(self) -> None:
        # The peer is not reading what we send (confirms, chunks): stop reading what it sends
        # too, so a publisher that ignores its confirms is held back by TCP instead of growing
        # our buffers; subscriptions stop pumping until the buffer drains.
        self.paused = True
        self._set_reading()

    def resume_writing(self) -> None:
        self.paused = False
        self._set_reading()
        for sub in list(self.subscriptions.values()):
            sub.pump()

    def _set_reading(self) -> None:
        """Read from the peer unless it does not read us or its frame waits for budget."""
        t = self.transport
        want = not (self.paused or self._waiting)
        if want != self._reading and t is not None and not t.is_closing():
            self._reading = want
            if want:
                t.resume_reading()
            else:
                t.pause_reading()

    def data_received(self, data: bytes) -> None:
        self.last_received = time.monotonic()
        try:
            # Pulled one by one: each frame is held to the limit in force when its turn comes
            # (Open raises it for the frames after it in the same read).
            for frame in self.splitter.feed(data):
                if self.closing:
                    return
                self.handle_frame(frame)
        except FrameTooLarge as e:
            self.fail(Code.FRAME_TOO_LARGE, str(e))
            return
        if not self.closing:
            self._track_incomplete()

    # --- a frame in pieces ----------------------------------------------------------------------

    def _track_incomplete(self) -> None:
        """After a read: a frame left incomplete has its whole length reserved in the broker's
        FrameBudget (or waits for it, not read meanwhile) and, after Open, a deadline."""
        s = self.splitter
        if s.begun != self._begun or not s.held:  # the frame held before, if any, is done
            self._begun = s.begun
            self._release_frame()
            if s.held and self.opened:
                self._start_frame_deadline()
        if s.pending and not self._reserved and not self._waiting:
            if self.broker.frame_budget.reserve(self, s.pending):
                self._reserved = s.pending
            else:
                self._waiting = True
                self._set_reading()

    def granted(self, size: int) -> None:
        """FrameBudget: the space this connection waited for is reserved; read on."""
        self._waiting = False
        self._reserved = size
        if self.closing:
            self._release_frame()
            return
        self._set_reading()

    def _release_frame(self) -> None:
        if self._reserved:
            self.broker.frame_budget.release(self._reserved)
            self._reserved = 0
        if self._frame_deadline is not None:
            self._frame_deadline.cancel()
            self._frame_deadline = None

    def _start_frame_deadline(self) -> None:
        self._frame_deadline = asyncio.get_running_loop().call_later(
            self.broker.config.frame_timeout, self._on_frame_deadline)

    def _on_frame_deadline(self) -> None:
        self._frame_deadline = None
        if self.closing or not self.splitter.held:
            return
        if not self._reading:  # we hold it back (budget, or it does not read): not its delay
            self._start_frame_deadline()
            return
        log.info("connection %s: a frame still incomplete after %ds (%d of %d bytes), closing",
                 self.peer, self.broker.config.frame_timeout, self.splitter.held,
                 self.splitter.pending)
        self.abort()

    # --- dispatch --------------------------------------------------------------------------------

    def handle_frame(self, frame: memoryview) -> None:
        if len(frame) >= 4 and frame[0] == 0 and frame[1] == Key.PUBLISH and self.opened:
            self.on_publish(frame)
            return
        cmd = f.decode(frame)
        if isinstance(cmd, f.FrameError):
            self.reject(cmd.key, cmd.version, cmd.correlation_id, cmd.code, cmd.reason)
            return
        verdict = machine.step(self.state, type(cmd))
        if isinstance(verdict, Refuse):
            reason = verdict.reason.format(type(cmd).__name__)
            if verdict.answer:
                self.reject(cmd.wire_key, 1, getattr(cmd, "correlation_id", None), verdict.code,
                            reason, cmd)
            else:
                self.fail(verdict.code, reason)
            return
        if not isinstance(verdict, machine.Allow):  # Drop: closing (data_received stops first)
            return
        if verdict.next is not self.state:
            self._enter(verdict.next)
        handler = _HANDLERS.get(type(cmd))
        if handler is None:  # a server-to-client command, or a response we never asked for
            self.reject(cmd.wire_key, 1, getattr(cmd, "correlation_id", None), Code.UNKNOWN_FRAME,
                        f"unexpected {type(cmd).__name__}")
            return
        try:
            handler(self, cmd)
        except Exception:  # a bug must cost this connection at most, never the broker
            log.exception("connection %s: %s failed", self.peer, type(cmd).__name__)
            self.reject(cmd.wire_key, 1, getattr(cmd, "correlation_id", None), Code.INTERNAL_ERROR,
                        "internal error", cmd)

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
        self._corr += 1
        self.write(f.encode(f.Close(self._corr, code, reason[:200])))
        self.abort()

    def abort(self) -> None:
        self._outcome(Outcome.CLOSED)
        if self.transport is not None:
            self.transport.close()  # flushes what is buffered first

    def write_room(self) -> int:
        """Bytes that may be written before the peer counts as not reading (WRITE_HIGH)."""
        t = self.transport
        return 0 if t is None else WRITE_HIGH - t.get_write_buffer_size()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def send(self, cmd: f.Command) -> None:
        self.write(f.encode(cmd))

    # --- the core's Session port (streamlet.core.ports) ----------------------------------------

    def confirmed(self, publisher_id: int, ids: list[bytes]) -> None:
        """``ids``: packed big-endian publishing ids, as PublishBatch carries them."""
        self.write(encode_confirm(publisher_id, ids))

    def rejected(self, publisher_id: int, ids: list[int], why: Refusal) -> None:
        self.send_publish_error(publisher_id, ids, _REFUSAL_CODES[why])

    def send_publish_error(self, publisher_id: int, ids: list[int], code: Code) -> None:
        self.send(f.PublishError(publisher_id, [(i, code) for i in ids]))

    def deliver(self, sub_id: int, chunks: list[memoryview], committed: int) -> None:
        """Deliver frames for stored chunks (header + data as on disk), all in one writev."""
        if self.transport is None or self.transport.is_closing():
            return
        v2 = committed if self.deliver_v2 else None
        buffers: list[bytes | memoryview] = []
        for chunk in chunks:
            buffers.append(deliver_prefix(sub_id, len(chunk), v2))
            buffers.append(chunk)
        self.transport.writelines(buffers)

    # --- handshake ---------------------------------------------------------------------------------

    def on_peer_properties(self, cmd: f.PeerProperties) -> None:
        self.client_properties = cmd.properties
        self.send(f.PeerPropertiesResponse(cmd.correlation_id, Code.OK, {
            "product": "streamlet",
            "version": ANNOUNCED_VERSION,  # clients gate features on this, not on the product
            "streamlet_version": __version__,
            "cluster_name": self.broker.config.cluster_name,
            "platform": "Python / streamlet",
            "copyright": "streamlet authors",
            "information": "streamlet, a RabbitMQ Stream protocol broker, https://streamlet.dev",
        }))

    def mechanisms(self) -> list[str]:
        """PLAIN; EXTERNAL too on a TLS connection whose client sent a verified certificate."""
        return MECHANISMS + (["EXTERNAL"] if self.certificate_name() is not None else [])

    def certificate_name(self) -> str | None:
        if not self.tls or self.transport is None:
            return None
        return peer_common_name(self.transport.get_extra_info("peercert"))

    def on_sasl_handshake(self, cmd: f.SaslHandshake) -> None:
        self.send(f.SaslHandshakeResponse(cmd.correlation_id, Code.OK, self.mechanisms()))

    def on_sasl_authenticate(self, cmd: f.SaslAuthenticate) -> None:
        if cmd.mechanism not in self.mechanisms():
            self.send(f.SaslAuthenticateResponse(cmd.correlation_id, Code.SASL_MECHANISM_NOT_SUPPORTED))
            return
        if cmd.mechanism == "EXTERNAL":  # the certificate's CN names a configured user
            user = self.certificate_name()
            known = any(u.name == user for u in self.broker.config.users)
            code = Code.OK if known else Code.AUTHENTICATION_FAILURE
        else:
            code, user = authenticate_plain(self.broker.config.users, cmd.data, self.peer)
        if code == Code.OK and user is not None and self._over_user_limit(user):
            code = Code.ACCESS_REFUSED
        self.send(f.SaslAuthenticateResponse(cmd.correlation_id, code))
        if code != Code.OK:
            log.info("connection %s: authentication failed (code %d)", self.peer, code)
            self.abort()
            return
        self.user = user
        self._outcome(Outcome.AUTHENTICATED)
        self.send(f.Tune(self.frame_max, self.heartbeat))

    def on_tune(self, cmd: f.Tune) -> None:  # after authentication (the machine's table)
        ours, theirs = self.frame_max, cmd.frame_max
        self.frame_max = min(ours, theirs) if ours and theirs else ours or theirs
        ours, theirs = self.heartbeat, cmd.heartbeat
        self.heartbeat = min(ours, theirs) if ours and theirs else 0

    def _over_user_limit(self, user: str) -> bool:
        cfg = self.broker.config
        own = next((u.max_connections for u in cfg.users if u.name == user), 0)
        limit = own or cfg.max_connections_per_user
        if limit and self.broker.user_connections(user) >= limit:
            log.warning("connection %s: user %s is at its limit of %d connections", self.peer, user, limit)
            return True
        return False

    def on_open(self, cmd: f.Open) -> None:  # after authentication (the machine's table)
        assert self.user is not None
        vhost = self.broker.vhosts.get(cmd.virtual_host or "/")
        if vhost is None or not self.broker.access.vhost_allowed(self.user, vhost.name):
            log.info("connection %s: user %s refused vhost %r", self.peer, self.user, cmd.virtual_host)
            self.send(f.OpenResponse(cmd.correlation_id, Code.VIRTUAL_HOST_ACCESS_FAILURE))
            # let the client read the answer and close first (rstream reports a closed socket
            # instead of the code if the close wins the race); the connection stays unopened
            asyncio.get_running_loop().call_later(OPEN_REFUSED_LINGER_S, self.abort)
            return
        self.vhost = vhost
        host, port = self.advertised()
        self._outcome(Outcome.OPENED)
        # frame_max is what clients should send; what they do send is taken up to the hard limit
        self.splitter.max_size = max(self.frame_max, self.broker.config.frame_limit)
        if self._heartbeat_handle:  # the handshake timer
            self._heartbeat_handle.cancel()
            self._heartbeat_handle = None
        self.send(f.OpenResponse(cmd.correlation_id, Code.OK, {
            "advertised_host": host, "advertised_port": str(port),
        }))
        if self.heartbeat:
            self._schedule_heartbeat()

    def _schedule_heartbeat(self) -> None:
        loop = asyncio.get_running_loop()
        self._heartbeat_handle = loop.call_later(self.heartbeat, self._on_heartbeat_timer)

    def _on_heartbeat_timer(self) -> None:
        if self.closing:
            return
        if not self._reading:
            # We are not reading it, so its heartbeats wait unread: it is alive if we hold its
            # frame back for budget or it took some of what we wrote since the last tick.
            buffered = self.transport.get_write_buffer_size() if self.transport else 0
            if self._waiting or buffered < self._buffered_at_tick:
                self.last_received = time.monotonic()
            self._buffered_at_tick = buffered
        if time.monotonic() - self.last_received > 2 * self.heartbeat:
            log.info("connection %s: no heartbeat for %ds, closing", self.peer, 2 * self.heartbeat)
            self.abort()
            return
        self.write(b"\x00\x00\x00\x04\x00\x17\x00\x01")  # Heartbeat
        self._schedule_heartbeat()

    def advertised(self) -> tuple[str, int]:
        """Where clients should connect for a stream: the TLS listener for a TLS connection."""
        host, port = self.broker.config.advertised
        tls = self.broker.config.tls
        if self.tls and tls is not None:
            port = tls.advertised_port or tls.port
        return host, port

    def on_close(self, cmd: f.Close) -> None:
        self.send(f.CloseResponse(cmd.correlation_id, Code.OK))
        self.abort()

    def on_exchange_command_versions(self, cmd: f.ExchangeCommandVersions) -> None:
        for v in cmd.versions:
            if v.key == Key.DELIVER and v.max_version >= 2:
                self.deliver_v2 = True
        self.send(f.ExchangeCommandVersionsResponse(cmd.correlation_id, Code.OK, COMMAND_VERSIONS))

    # --- publishing ----------------------------------------------------------------------------------

    def on_declare_publisher(self, cmd: f.DeclarePublisher) -> None:
        stream = self.streams.get(cmd.stream)
        if stream is None:
            code = Code.STREAM_DOES_NOT_EXIST
        elif self.refused("write", cmd.stream):
            code = Code.ACCESS_REFUSED
        elif stream.sealed:
            code = Code.STREAM_NOT_AVAILABLE  # moved: Metadata names its new broker
        elif cmd.publisher_id in self.publishers or cmd.reference is not None and (
            len(cmd.reference.encode()) > 256
            or stream.reference_taken(cmd.reference)
        ):
            code = Code.PRECONDITION_FAILED
        else:
            pub = Publisher(cmd.publisher_id, cmd.reference or None, stream, self)
            self.publishers[cmd.publisher_id] = pub
            self.moved_publishers.discard(cmd.publisher_id)
            stream.attach_publisher(pub)
            code = Code.OK
        self.send(f.DeclarePublisherResponse(cmd.correlation_id, code))

    def on_publish(self, frame: memoryview) -> None:
        version = frame[2] << 8 | frame[3]
        try:
            batch = parse_publish(frame[4:], version)
        except Malformed as e:
            self.reject(Key.PUBLISH, version, None, Code.UNKNOWN_FRAME, f"malformed Publish: {e}")
            return
        pub = self.publishers.get(batch.publisher_id)
        if pub is None:
            ids = list(struct.unpack(f">{batch.count}Q", batch.ids))
            moved = batch.publisher_id in self.moved_publishers
            self.send_publish_error(batch.publisher_id, ids, Code.STREAM_NOT_AVAILABLE if moved
                                    else Code.PUBLISHER_DOES_NOT_EXIST)
            return
        pub.stream.publish(pub, batch)

    def on_query_publisher_sequence(self, cmd: f.QueryPublisherSequence) -> None:
        stream = self.streams.get(cmd.stream)
        if stream is None:
            self.send(f.QueryPublisherSequenceResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, 0))
            return
        if self.refused("read", cmd.stream):
            self.send(f.QueryPublisherSequenceResponse(cmd.correlation_id, Code.ACCESS_REFUSED, 0))
            return
        self.send(f.QueryPublisherSequenceResponse(
            cmd.correlation_id, Code.OK, stream.sequences.get(cmd.reference, 0)))

    def on_delete_publisher(self, cmd: f.DeletePublisher) -> None:
        pub = self.publishers.pop(cmd.publisher_id, None)
        if pub is None and cmd.publisher_id in self.moved_publishers:
            self.moved_publishers.discard(cmd.publisher_id)  # already dropped by the move
            self.send(f.DeletePublisherResponse(cmd.correlation_id, Code.OK))
            return
        if pub is None:
            self.send(f.DeletePublisherResponse(cmd.correlation_id, Code.PUBLISHER_DOES_NOT_EXIST))
            return
        pub.stream.detach_publisher(pub)  # confirms of what it sent go out before the answer
        self.send(f.DeletePublisherResponse(cmd.correlation_id, Code.OK))

    # --- consuming -------------------------------------------------------------------------------------

    def on_subscribe(self, cmd: f.Subscribe) -> None:
        stream = self.streams.get(cmd.stream)
        props = cmd.properties
        single_active = props.get("single-active-consumer", "false").lower() == "true"
        if stream is None:
            code = Code.STREAM_DOES_NOT_EXIST
        elif self.refused("read", cmd.stream):
            code = Code.ACCESS_REFUSED
        elif cmd.subscription_id in self.subscriptions:
            code = Code.SUBSCRIPTION_ID_ALREADY_EXISTS
        elif cmd.offset_type not in OffsetType.__members__.values():
            code = Code.PRECONDITION_FAILED
        elif single_active and not props.get("name"):
            code = Code.PRECONDITION_FAILED  # a single active consumer needs its group's name
        else:
            code = Code.OK
        if code != Code.OK or stream is None:
            self.send(f.SubscribeResponse(cmd.correlation_id, code))
            return
        start = resolve_start(stream, cmd.offset_type, cmd.offset)
        sub = Subscription(self, cmd.subscription_id, stream, start, cmd.credit, props)
        sub.matcher = matcher_from(props)
        sub.active = not single_active  # a single active consumer waits for its ConsumerUpdate
        self.subscriptions[cmd.subscription_id] = sub
        stream.attach_reader(sub)
        self.send(f.SubscribeResponse(cmd.correlation_id, Code.OK))
        if single_active:
            assert self.vhost is not None
            self.vhost.sac.join(sub, props["name"], self._partition_index(props, cmd.stream))
        else:
            sub.pump()

    def _partition_index(self, props: dict[str, str], stream: str) -> int:
        """The stream's position in the ``super-stream`` property's super stream, else -1."""
        assert self.vhost is not None
        ss = self.vhost.superstreams.get(props.get("super-stream", ""))
        return ss.partitions.index(stream) if ss is not None and stream in ss.partitions else -1

    def activate(self, sub: Subscription, active: bool) -> None:
        """Tell the client ``sub`` became active (it delivers once the client answers) or
        passive (it already stopped)."""
        self._corr += 1
        self.pending_updates[self._corr] = (sub, active)
        self.send(f.ConsumerUpdate(self._corr, sub.id, int(active)))
        asyncio.get_running_loop().call_later(self.broker.config.request_timeout,
                                              self._check_answered, self._corr)

    def _check_answered(self, corr: int) -> None:
        """A client that leaves a ConsumerUpdate unanswered is closed (as RabbitMQ does): its
        group would otherwise wait for it forever, a partition's messages going to nobody."""
        if corr in self.pending_updates and not self.closing:
            log.warning("connection %s: ConsumerUpdate %d unanswered for %ds, closing", self.peer,
                        corr, self.broker.config.request_timeout)
            self.abort()

    def on_consumer_update_response(self, cmd: f.ConsumerUpdateResponse) -> None:
        pending = self.pending_updates.pop(cmd.correlation_id, None)
        if pending is None:
            return
        sub, activated = pending
        if self.subscriptions.get(sub.id) is not sub or self.vhost is None:
            return  # unsubscribed meanwhile (the group already moved on)
        if not activated:
            self.vhost.sac.stepped_down(sub)
            return
        if not self.vhost.sac.is_active(sub):
            return  # told to step down before this answer came
        if cmd.code == Code.OK and cmd.offset_type in OffsetType.__members__.values():
            sub.cursor = resolve_start(sub.stream, cmd.offset_type, cmd.offset)
        # offset type 0 (or an error answer): start where the subscription's own spec said
        sub.active = True
        sub.pump()

    def on_credit(self, cmd: f.Credit) -> None:
        sub = self.subscriptions.get(cmd.subscription_id)
        if sub is None:
            self.send(f.CreditResponse(Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, cmd.subscription_id))
            return
        sub.credit = min(sub.credit + cmd.credit, 0xFFFF)
        sub.pump()

    def on_unsubscribe(self, cmd: f.Unsubscribe) -> None:
        sub = self.subscriptions.get(cmd.subscription_id)
        if sub is None:
            self.send(f.UnsubscribeResponse(cmd.correlation_id, Code.SUBSCRIPTION_ID_DOES_NOT_EXIST))
            return
        self.send(f.UnsubscribeResponse(cmd.correlation_id, Code.OK))
        self.drop_subscription(sub)

    def on_store_offset(self, cmd: f.StoreOffset) -> None:
        stream = self.streams.get(cmd.stream)
        if stream is None or not cmd.reference or len(cmd.reference.encode()) > 255:
            return  # StoreOffset has no answer; RabbitMQ ignores these too
        if self.refused("read", cmd.stream):
            return
        stream.store_offset(cmd.reference, cmd.offset)

    def on_query_offset(self, cmd: f.QueryOffset) -> None:
        stream = self.streams.get(cmd.stream)
        if stream is None:
            self.send(f.QueryOffsetResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, 0))
            return
        if self.refused("read", cmd.stream):
            self.send(f.QueryOffsetResponse(cmd.correlation_id, Code.ACCESS_REFUSED, 0))
            return
        offset = stream.log.offsets.get(cmd.reference)
        if offset is None:
            self.send(f.QueryOffsetResponse(cmd.correlation_id, Code.NO_OFFSET, 0))
        else:
            self.send(f.QueryOffsetResponse(cmd.correlation_id, Code.OK, offset))

    def on_resolve_offset_spec(self, cmd: f.ResolveOffsetSpec) -> None:
        stream = self.streams.get(cmd.stream)
        if stream is None:
            self.send(f.ResolveOffsetSpecResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST))
            return
        if self.refused("read", cmd.stream):
            self.send(f.ResolveOffsetSpecResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
            return
        if cmd.offset_type not in OffsetType.__members__.values():
            self.send(f.ResolveOffsetSpecResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
            return
        offset = resolve_start(stream, cmd.offset_type, cmd.offset)
        self.send(f.ResolveOffsetSpecResponse(cmd.correlation_id, Code.OK, OffsetType.OFFSET, offset))

    # --- streams -----------------------------------------------------------------------------------------

    def on_create(self, cmd: f.Create) -> None:
        why = valid_stream_name(cmd.stream)
        if why is not None:
            log.info("create %r refused: %s", cmd.stream, why)
            code = Code.PRECONDITION_FAILED
        elif self.refused("configure", cmd.stream):
            code = Code.ACCESS_REFUSED
        elif self.streams.get(cmd.stream) is not None:
            code = Code.STREAM_ALREADY_EXISTS
        else:
            try:
                settings = parse_create_arguments(cmd.arguments, self.broker.config.retention)
            except ConfigError as e:
                log.info("create %r refused: %s", cmd.stream, e)
                code = Code.PRECONDITION_FAILED
            else:
                try:
                    self.streams.create(cmd.stream, settings)
                    code = Code.OK
                except LimitReached:  # logged, with why, where it was reached
                    code = Code.PRECONDITION_FAILED
                except OSError as e:  # the disk's problem, not this connection's
                    log.error("create %r failed: %s", cmd.stream, e)
                    code = Code.INTERNAL_ERROR
        self.send(f.CreateResponse(cmd.correlation_id, code))

    def on_delete(self, cmd: f.Delete) -> None:
        if self.streams.get(cmd.stream) is None:
            self.send(f.DeleteResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST))
            return
        if self.refused("configure", cmd.stream):
            self.send(f.DeleteResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
            return
        assert self.vhost is not None
        stream = self.broker.delete_stream(self.vhost, cmd.stream)  # files gone on return
        self.send(f.DeleteResponse(cmd.correlation_id, Code.OK))
        if stream is not None:
            self.broker.stream_gone(stream)  # MetadataUpdate after the answer

    def on_metadata(self, cmd: f.Metadata) -> None:
        assert self.vhost is not None
        vhost, directory = self.vhost.name, self.broker.directory()
        tls = self.broker.config.tls if self.tls else None

        def elsewhere(name: str) -> Address | None:
            """Where the stream directory says a stream not held here lives."""
            address = directory.leader(vhost, name)
            if address is None or address == self.broker.config.advertised:
                return None  # unknown, or a stale entry naming this broker
            # A Broker's pods share their ports: a TLS client goes to the other pod's TLS port.
            return (address[0], tls.advertised_port or tls.port) if tls else address

        def here(name: str) -> bool:  # a sealed stream moved: the directory names its leader
            stream = self.streams.get(name)
            return stream is not None and not stream.sealed

        answer = answer_metadata(cmd.streams, here, self.advertised(), elsewhere)
        for name in cmd.streams:
            stream = self.streams.get(name)
            if stream is not None:
                stream.watch(self)
                self.watching.add(stream)
        self.send(f.MetadataResponse(
            cmd.correlation_id, [f.BrokerInfo(*b) for b in answer.brokers],
            [f.StreamMetadata(name, code, leader, []) for name, code, leader in answer.streams]))

    def on_stream_stats(self, cmd: f.StreamStats) -> None:
        stream = self.streams.get(cmd.stream)
        if stream is None:
            self.send(f.StreamStatsResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST))
            return
        if self.refused("read", cmd.stream):
            self.send(f.StreamStatsResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
            return
        self.send(f.StreamStatsResponse(cmd.correlation_id, Code.OK, stream.stats()))

    def stream_moved(self, stream: Stream) -> None:
        """``stream`` moved to another broker: its publishers here are gone; the client asks
        Metadata again (which names the new broker) and declares them there."""
        self.moved_publishers.update(self._drop_publishers(stream))
        self.send(f.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, stream.name))

    def _drop_publishers(self, stream: Stream) -> list[int]:
        """Forget this connection's publishers on ``stream``; return their ids."""
        ids = [pid for pid, pub in self.publishers.items() if pub.stream is stream]
        for pid in ids:
            del self.publishers[pid]
        return ids

    def stream_gone(self, stream: Stream) -> None:
        """The stream is gone: drop what this connection held on it and tell the client."""
        self._drop_publishers(stream)
        for sub in list(self.subscriptions.values()):
            if sub.stream is stream:
                self.drop_subscription(sub)
        stream.unwatch(self)
        self.watching.discard(stream)
        self.send(f.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, stream.name))

    # --- super streams -------------------------------------------------------------------------------------

    def on_create_super_stream(self, cmd: f.CreateSuperStream) -> None:
        assert self.vhost is not None
        if any(self.refused("configure", n) for n in (cmd.name, *cmd.partitions)):
            self.send(f.CreateSuperStreamResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
            return
        try:
            settings = parse_create_arguments(cmd.arguments, self.broker.config.retention)
        except ConfigError as e:
            code, why = Code.PRECONDITION_FAILED, str(e)
        else:
            try:
                self.vhost.create_super_stream(cmd.name, cmd.partitions, cmd.binding_keys,
                                               cmd.arguments, settings)
                code, why = Code.OK, ""
            except SuperStreamRefused as e:
                code, why = _DENIAL_CODES[e.reason], e.why
        if code != Code.OK:
            log.info("create super stream %r refused: %s", cmd.name, why)
        self.send(f.CreateSuperStreamResponse(cmd.correlation_id, code))

    def on_delete_super_stream(self, cmd: f.DeleteSuperStream) -> None:
        assert self.vhost is not None
        ss = self.vhost.superstreams.get(cmd.name)
        if ss is None:
            self.send(f.DeleteSuperStreamResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST))
            return
        if any(self.refused("configure", n) for n in (cmd.name, *ss.partitions)):
            self.send(f.DeleteSuperStreamResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
            return
        deleted = self.vhost.delete_super_stream(cmd.name) or []  # files gone on return
        self.send(f.DeleteSuperStreamResponse(cmd.correlation_id, Code.OK))
        for stream in deleted:
            self.broker.stream_gone(stream)  # one MetadataUpdate per partition

    def on_partitions(self, cmd: f.Partitions) -> None:
        assert self.vhost is not None
        ss = self.vhost.superstreams.get(cmd.super_stream) or self.broker.directory().super_stream(
            self.vhost.name, cmd.super_stream)  # held elsewhere: its partitions are too
        if ss is None:
            self.send(f.PartitionsResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, []))
            return
        self.send(f.PartitionsResponse(cmd.correlation_id, Code.OK, list(ss.partitions)))

    def on_route(self, cmd: f.Route) -> None:
        assert self.vhost is not None
        ss = self.vhost.superstreams.get(cmd.super_stream) or self.broker.directory().super_stream(
            self.vhost.name, cmd.super_stream)
        if ss is None:
            self.send(f.RouteResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, []))
            return
        self.send(f.RouteResponse(cmd.correlation_id, Code.OK, ss.route(cmd.routing_key)))


#: Command type -> handler. One table for the class, not a dict of bound methods per
#: connection: that would tie each connection into a reference cycle, kept until the
#: garbage collector's next full pass (10,000 closed connections held ~56 MB).
_HANDLERS: dict[type, Callable[[Connection, Any], None]] = {
    f.PeerProperties: Connection.on_peer_properties,
    f.SaslHandshake: Connection.on_sasl_handshake,
    f.SaslAuthenticate: Connection.on_sasl_authenticate,
    f.Tune: Connection.on_tune,
    f.Open: Connection.on_open,
    f.Close: Connection.on_close,
    f.CloseResponse: lambda conn, cmd: conn.abort(),
    f.Heartbeat: lambda conn, cmd: None,
    f.DeclarePublisher: Connection.on_declare_publisher,
    f.QueryPublisherSequence: Connection.on_query_publisher_sequence,
    f.DeletePublisher: Connection.on_delete_publisher,
    f.Subscribe: Connection.on_subscribe,
    f.Credit: Connection.on_credit,
    f.StoreOffset: Connection.on_store_offset,
    f.QueryOffset: Connection.on_query_offset,
    f.Unsubscribe: Connection.on_unsubscribe,
    f.Create: Connection.on_create,
    f.Delete: Connection.on_delete,
    f.Metadata: Connection.on_metadata,
    f.ExchangeCommandVersions: Connection.on_exchange_command_versions,
    f.StreamStats: Connection.on_stream_stats,
    f.ResolveOffsetSpec: Connection.on_resolve_offset_spec,
    f.ConsumerUpdateResponse: Connection.on_consumer_update_response,
    f.CreateSuperStream: Connection.on_create_super_stream,
    f.DeleteSuperStream: Connection.on_delete_super_stream,
    f.Partitions: Connection.on_partitions,
    f.Route: Connection.on_route,
}
