"""One client connection: framing, the handshake state machine, and command dispatch.

Handshake: PeerProperties, SaslHandshake, SaslAuthenticate, Tune (server first, client echoes),
Open. Before Open only those (and Close, Heartbeat) are allowed, and frames are capped at 8192
bytes as RabbitMQ does. A malformed or unknown frame gets the protocol's code and the connection
is closed; it never disturbs another connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..protocol import Code, FrameSplitter, FrameTooLarge, Key, OffsetType
from ..protocol import frames as f
from ..protocol.constants import NO_LEADER, PRE_OPEN_FRAME_MAX, RESPONSE_FLAG
from ..protocol.publish import deliver_prefix, encode_confirm, parse_publish
from ..protocol.wire import Malformed
from .arguments import parse_create_arguments, valid_stream_name
from .auth import MECHANISMS, authenticate_plain
from .config import ConfigError
from .streams import Publisher
from .subscription import Subscription, resolve_start

if TYPE_CHECKING:
    from .server import Broker

log = logging.getLogger("streamlet.broker")

_ERROR_RESPONSE = struct.Struct(">IHHIH")
_HANDSHAKE = (f.PeerProperties, f.SaslHandshake, f.SaslAuthenticate, f.Tune, f.Open, f.Close,
              f.Heartbeat)
#: The version RabbitMQ clients check to enable features (3.13 semantics: v2 frames, filters).
ANNOUNCED_VERSION = "3.13.0"

#: What we advertise in ExchangeCommandVersions, in RabbitMQ's order (rstream reads by position).
COMMAND_VERSIONS = [f.CommandVersion(k, 1, 2 if k == Key.PUBLISH else 1) for k in (
    Key.DECLARE_PUBLISHER, Key.PUBLISH, Key.QUERY_PUBLISHER_SEQUENCE, Key.DELETE_PUBLISHER,
    Key.SUBSCRIBE, Key.CREDIT, Key.STORE_OFFSET, Key.QUERY_OFFSET, Key.UNSUBSCRIBE, Key.CREATE,
    Key.DELETE, Key.METADATA, Key.CLOSE, Key.HEARTBEAT, Key.ROUTE, Key.PARTITIONS,
    Key.STREAM_STATS, Key.RESOLVE_OFFSET_SPEC,
)]


class Connection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.splitter = FrameSplitter(PRE_OPEN_FRAME_MAX)
        self.client_properties: dict[str, str] = {}
        self.user: str | None = None
        self.tuned = False
        self.opened = False
        self.closing = False
        self.paused = False
        self.frame_max = broker.config.frame_max
        self.heartbeat = broker.config.heartbeat
        self.deliver_v2 = False
        self.publishers: dict[int, Publisher] = {}
        self.subscriptions: dict[int, Subscription] = {}
        self.last_received = time.monotonic()
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._corr = 0
        self._handlers: dict[type, Callable[[Any], None]] = {
            f.PeerProperties: self.on_peer_properties,
            f.SaslHandshake: self.on_sasl_handshake,
            f.SaslAuthenticate: self.on_sasl_authenticate,
            f.Tune: self.on_tune,
            f.Open: self.on_open,
            f.Close: self.on_close,
            f.CloseResponse: lambda cmd: self.abort(),
            f.Heartbeat: lambda cmd: None,
            f.DeclarePublisher: self.on_declare_publisher,
            f.QueryPublisherSequence: self.on_query_publisher_sequence,
            f.DeletePublisher: self.on_delete_publisher,
            f.Subscribe: self.on_subscribe,
            f.Credit: self.on_credit,
            f.StoreOffset: self.on_store_offset,
            f.QueryOffset: self.on_query_offset,
            f.Unsubscribe: self.on_unsubscribe,
            f.Create: self.on_create,
            f.Delete: self.on_delete,
            f.Metadata: self.on_metadata,
            f.ExchangeCommandVersions: self.on_exchange_command_versions,
            f.StreamStats: self.on_stream_stats,
            f.ResolveOffsetSpec: self.on_resolve_offset_spec,
        }

    # --- transport callbacks ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(high=4 << 20, low=1 << 20)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        self.broker.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._heartbeat_handle:
            self._heartbeat_handle.cancel()
        self.broker.connections.discard(self)
        for pub in self.publishers.values():
            pub.stream.publishers.discard(pub)
        for sub in self.subscriptions.values():
            sub.stream.subscriptions.discard(sub)
        for stream in self.broker.streams.streams.values():
            stream.watchers.discard(self)
        self.publishers.clear()
        self.subscriptions.clear()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for sub in list(self.subscriptions.values()):
            sub.pump()

    def data_received(self, data: bytes) -> None:
        self.last_received = time.monotonic()
        try:
            frames = self.splitter.feed(data)
        except FrameTooLarge as e:
            self.fail(Code.FRAME_TOO_LARGE, str(e))
            return
        for frame in frames:
            if self.closing:
                return
            self.handle_frame(frame)

    # --- dispatch --------------------------------------------------------------------------------

    def handle_frame(self, frame: memoryview) -> None:
        if len(frame) >= 4 and frame[0] == 0 and frame[1] == Key.PUBLISH and self.opened:
            self.on_publish(frame)
            return
        cmd = f.decode(frame)
        if isinstance(cmd, f.FrameError):
            self.reject(cmd.key, cmd.version, cmd.correlation_id, cmd.code, cmd.reason)
            return
        if not self.opened and not isinstance(cmd, _HANDSHAKE):
            key = cmd.wire_key
            corr = getattr(cmd, "correlation_id", None)
            self.reject(key, 1, corr, Code.ACCESS_REFUSED, f"{type(cmd).__name__} before Open")
            return
        handler = self._handlers.get(type(cmd))
        if handler is None:  # a server-to-client command, or a response we never asked for
            self.reject(cmd.wire_key, 1, getattr(cmd, "correlation_id", None), Code.UNKNOWN_FRAME,
                        f"unexpected {type(cmd).__name__}")
            return
        try:
            handler(cmd)
        except Exception:  # a bug must cost this connection at most, never the broker
            log.exception("connection %s: %s failed", self.peer, type(cmd).__name__)
            self.reject(cmd.wire_key, 1, getattr(cmd, "correlation_id", None), Code.INTERNAL_ERROR,
                        "internal error")

    def reject(self, key: int, version: int, corr: int | None, code: Code, reason: str) -> None:
        """Answer a bad frame with its code (when it had a correlation id), then close."""
        log.info("connection %s: closing: %s (code %d)", self.peer, reason, code)
        if corr is not None and not key & RESPONSE_FLAG:
            self.write(_ERROR_RESPONSE.pack(10, (key & 0x7FFF) | RESPONSE_FLAG, version or 1, corr, code))
        self.fail(code, reason)

    def fail(self, code: Code, reason: str) -> None:
        """Tell the client why, and close the connection."""
        if self.closing:
            return
        self._corr += 1
        self.write(f.encode(f.Close(self._corr, code, reason[:200])))
        self.abort()

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()  # flushes what is buffered first

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def send(self, cmd: f.Command) -> None:
        self.write(f.encode(cmd))

    def send_confirm(self, publisher_id: int, ids: list[int]) -> None:
        self.write(encode_confirm(publisher_id, ids))

    def send_publish_error(self, publisher_id: int, ids: list[int], code: Code) -> None:
        self.send(f.PublishError(publisher_id, [(i, code) for i in ids]))

    def send_chunk(self, sub_id: int, chunk: memoryview, committed: int) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        prefix = deliver_prefix(sub_id, len(chunk), committed if self.deliver_v2 else None)
        self.transport.writelines((prefix, chunk))

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

    def on_sasl_handshake(self, cmd: f.SaslHandshake) -> None:
        self.send(f.SaslHandshakeResponse(cmd.correlation_id, Code.OK, MECHANISMS))

    def on_sasl_authenticate(self, cmd: f.SaslAuthenticate) -> None:
        if cmd.mechanism not in MECHANISMS:
            self.send(f.SaslAuthenticateResponse(cmd.correlation_id, Code.SASL_MECHANISM_NOT_SUPPORTED))
            return
        code, user = authenticate_plain(self.broker.config.users, cmd.data, self.peer)
        self.send(f.SaslAuthenticateResponse(cmd.correlation_id, code))
        if code != Code.OK:
            log.info("connection %s: authentication failed (code %d)", self.peer, code)
            self.abort()
            return
        self.user = user
        self.send(f.Tune(self.frame_max, self.heartbeat))

    def on_tune(self, cmd: f.Tune) -> None:
        if self.user is None:
            self.fail(Code.ACCESS_REFUSED, "Tune before authentication")
            return
        ours, theirs = self.frame_max, cmd.frame_max
        self.frame_max = min(ours, theirs) if ours and theirs else ours or theirs
        ours, theirs = self.heartbeat, cmd.heartbeat
        self.heartbeat = min(ours, theirs) if ours and theirs else 0
        self.tuned = True

    def on_open(self, cmd: f.Open) -> None:
        if self.user is None:
            self.fail(Code.ACCESS_REFUSED, "Open before authentication")
            return
        if cmd.virtual_host not in ("/", ""):
            self.send(f.OpenResponse(cmd.correlation_id, Code.VIRTUAL_HOST_ACCESS_FAILURE))
            self.abort()
            return
        host, port = self.broker.config.advertised
        self.opened = True
        self.splitter.max_size = self.frame_max
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
        if time.monotonic() - self.last_received > 2 * self.heartbeat:
            log.info("connection %s: no heartbeat for %ds, closing", self.peer, 2 * self.heartbeat)
            self.abort()
            return
        self.write(b"\x00\x00\x00\x04\x00\x17\x00\x01")  # Heartbeat
        self._schedule_heartbeat()

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
        stream = self.broker.streams.get(cmd.stream)
        if stream is None:
            code = Code.STREAM_DOES_NOT_EXIST
        elif cmd.publisher_id in self.publishers:
            code = Code.PRECONDITION_FAILED
        elif cmd.reference is not None and (
            len(cmd.reference.encode()) > 256
            or any(p.reference == cmd.reference for p in stream.publishers)
        ):
            code = Code.PRECONDITION_FAILED
        else:
            pub = Publisher(cmd.publisher_id, cmd.reference or None, stream, self)
            self.publishers[cmd.publisher_id] = pub
            stream.publishers.add(pub)
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
            self.send_publish_error(batch.publisher_id, batch.publishing_ids, Code.PUBLISHER_DOES_NOT_EXIST)
            return
        pub.stream.publish(pub, batch)

    def on_query_publisher_sequence(self, cmd: f.QueryPublisherSequence) -> None:
        stream = self.broker.streams.get(cmd.stream)
        if stream is None:
            self.send(f.QueryPublisherSequenceResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, 0))
            return
        self.send(f.QueryPublisherSequenceResponse(
            cmd.correlation_id, Code.OK, stream.sequences.get(cmd.reference, 0)))

    def on_delete_publisher(self, cmd: f.DeletePublisher) -> None:
        pub = self.publishers.pop(cmd.publisher_id, None)
        if pub is None:
            self.send(f.DeletePublisherResponse(cmd.correlation_id, Code.PUBLISHER_DOES_NOT_EXIST))
            return
        pub.stream.flush()  # confirms of what it sent go out before the answer
        pub.stream.publishers.discard(pub)
        self.send(f.DeletePublisherResponse(cmd.correlation_id, Code.OK))

    # --- consuming -------------------------------------------------------------------------------------

    def on_subscribe(self, cmd: f.Subscribe) -> None:
        stream = self.broker.streams.get(cmd.stream)
        if stream is None:
            code = Code.STREAM_DOES_NOT_EXIST
        elif cmd.subscription_id in self.subscriptions:
            code = Code.SUBSCRIPTION_ID_ALREADY_EXISTS
        elif cmd.offset_type not in OffsetType.__members__.values():
            code = Code.PRECONDITION_FAILED
        else:
            code = Code.OK
        if code != Code.OK or stream is None:
            self.send(f.SubscribeResponse(cmd.correlation_id, code))
            return
        stream.flush()  # so "next" and "last" see every confirmed message
        start = resolve_start(stream, cmd.offset_type, cmd.offset)
        sub = Subscription(self, cmd.subscription_id, stream, start, cmd.credit, cmd.properties)
        self.subscriptions[cmd.subscription_id] = sub
        stream.subscriptions.add(sub)
        self.send(f.SubscribeResponse(cmd.correlation_id, Code.OK))
        sub.pump()

    def on_credit(self, cmd: f.Credit) -> None:
        sub = self.subscriptions.get(cmd.subscription_id)
        if sub is None:
            self.send(f.CreditResponse(Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, cmd.subscription_id))
            return
        sub.credit = min(sub.credit + cmd.credit, 0xFFFF)
        sub.pump()

    def on_unsubscribe(self, cmd: f.Unsubscribe) -> None:
        sub = self.subscriptions.pop(cmd.subscription_id, None)
        if sub is None:
            self.send(f.UnsubscribeResponse(cmd.correlation_id, Code.SUBSCRIPTION_ID_DOES_NOT_EXIST))
            return
        sub.stream.subscriptions.discard(sub)
        self.send(f.UnsubscribeResponse(cmd.correlation_id, Code.OK))

    def on_store_offset(self, cmd: f.StoreOffset) -> None:
        stream = self.broker.streams.get(cmd.stream)
        if stream is None or not cmd.reference or len(cmd.reference.encode()) > 255:
            return  # StoreOffset has no answer; RabbitMQ ignores these too
        stream.store_offset(cmd.reference, cmd.offset)

    def on_query_offset(self, cmd: f.QueryOffset) -> None:
        stream = self.broker.streams.get(cmd.stream)
        if stream is None:
            self.send(f.QueryOffsetResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, 0))
            return
        offset = stream.log.offsets.get(cmd.reference)
        if offset is None:
            self.send(f.QueryOffsetResponse(cmd.correlation_id, Code.NO_OFFSET, 0))
        else:
            self.send(f.QueryOffsetResponse(cmd.correlation_id, Code.OK, offset))

    def on_resolve_offset_spec(self, cmd: f.ResolveOffsetSpec) -> None:
        stream = self.broker.streams.get(cmd.stream)
        if stream is None:
            self.send(f.ResolveOffsetSpecResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST))
            return
        if cmd.offset_type not in OffsetType.__members__.values():
            self.send(f.ResolveOffsetSpecResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
            return
        stream.flush()
        offset = resolve_start(stream, cmd.offset_type, cmd.offset)
        self.send(f.ResolveOffsetSpecResponse(cmd.correlation_id, Code.OK, OffsetType.OFFSET, offset))

    # --- streams -----------------------------------------------------------------------------------------

    def on_create(self, cmd: f.Create) -> None:
        why = valid_stream_name(cmd.stream)
        if why is not None:
            log.info("create %r refused: %s", cmd.stream, why)
            code = Code.PRECONDITION_FAILED
        elif self.broker.streams.get(cmd.stream) is not None:
            code = Code.STREAM_ALREADY_EXISTS
        else:
            try:
                settings = parse_create_arguments(cmd.arguments, self.broker.config.retention)
            except ConfigError as e:
                log.info("create %r refused: %s", cmd.stream, e)
                code = Code.PRECONDITION_FAILED
            else:
                self.broker.streams.create(cmd.stream, settings)
                code = Code.OK
        self.send(f.CreateResponse(cmd.correlation_id, code))

    def on_delete(self, cmd: f.Delete) -> None:
        if self.broker.streams.get(cmd.stream) is None:
            self.send(f.DeleteResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST))
            return
        self.send(f.DeleteResponse(cmd.correlation_id, Code.OK))
        self.broker.delete_stream(cmd.stream)

    def on_metadata(self, cmd: f.Metadata) -> None:
        host, port = self.broker.config.advertised
        entries = []
        for name in cmd.streams:
            stream = self.broker.streams.get(name)
            if stream is None:
                entries.append(f.StreamMetadata(name, Code.STREAM_DOES_NOT_EXIST, NO_LEADER, []))
            else:
                stream.watchers.add(self)
                entries.append(f.StreamMetadata(name, Code.OK, 0, []))
        self.send(f.MetadataResponse(cmd.correlation_id, [f.BrokerInfo(0, host, port)], entries))

    def on_stream_stats(self, cmd: f.StreamStats) -> None:
        stream = self.broker.streams.get(cmd.stream)
        if stream is None:
            self.send(f.StreamStatsResponse(cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST))
            return
        stream.flush()
        self.send(f.StreamStatsResponse(cmd.correlation_id, Code.OK, stream.stats()))

    def forget_stream(self, name: str) -> None:
        """The stream is gone: drop what this connection held on it and tell the client."""
        for pid, pub in list(self.publishers.items()):
            if pub.stream.name == name:
                del self.publishers[pid]
        for sid, sub in list(self.subscriptions.items()):
            if sub.stream.name == name:
                del self.subscriptions[sid]
        self.send(f.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, name))
