"""One RabbitMQ Stream connection: each frame checked against the handshake's table
(streamlet.rabbitmq.machine), then run by its handler. Publish, the hot path, skips the generic
decoder. A malformed or unknown frame gets the protocol's code, answered in its request's
response layout, and the connection is closed; it never disturbs another connection."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...rabbitmq import Code, Key, machine
from ...rabbitmq import frames as f
from ...rabbitmq.frames import replication as rf
from . import consuming, handshake, policies, publishing, replication, streams, superstreams
from .state import ConnectionState

log = logging.getLogger("streamlet.broker")

_on_publish = publishing.on_publish


class Connection(ConnectionState):
    def accepted(self) -> None:
        handshake.start(self)

    def handle_frame(self, frame: memoryview) -> None:
        if len(frame) >= 4 and frame[0] == 0 and frame[1] == Key.PUBLISH and self.opened:
            _on_publish(self, frame)
            return
        cmd = f.decode(frame)
        if isinstance(cmd, f.FrameError):
            self.reject(cmd.key, cmd.version, cmd.correlation_id, cmd.code, cmd.reason)
            return
        verdict = machine.step(self.state, type(cmd))
        if isinstance(verdict, machine.Refuse):
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
            self.enter(verdict.next)
        handler = HANDLERS.get(type(cmd))
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


#: Command type -> handler, by area. Module functions, not bound methods: a dict of bound
#: methods per connection would tie each connection into a reference cycle, kept until the
#: garbage collector's next full pass (10,000 closed connections held ~56 MB).
HANDLERS: dict[type, Callable[[ConnectionState, Any], None]] = {
    f.PeerProperties: handshake.on_peer_properties,
    f.SaslHandshake: handshake.on_sasl_handshake,
    f.SaslAuthenticate: handshake.on_sasl_authenticate,
    f.Tune: handshake.on_tune,
    f.Open: handshake.on_open,
    f.Close: handshake.on_close,
    f.CloseResponse: lambda conn, cmd: conn.abort(),
    f.Heartbeat: lambda conn, cmd: None,
    f.ExchangeCommandVersions: handshake.on_exchange_command_versions,
    f.DeclarePublisher: publishing.on_declare_publisher,
    f.QueryPublisherSequence: publishing.on_query_publisher_sequence,
    f.DeletePublisher: publishing.on_delete_publisher,
    f.Subscribe: consuming.on_subscribe,
    f.Credit: consuming.on_credit,
    f.StoreOffset: consuming.on_store_offset,
    f.QueryOffset: consuming.on_query_offset,
    f.Unsubscribe: consuming.on_unsubscribe,
    f.ResolveOffsetSpec: consuming.on_resolve_offset_spec,
    f.ConsumerUpdateResponse: consuming.on_consumer_update_response,
    f.Create: streams.on_create,
    f.Delete: streams.on_delete,
    f.Metadata: streams.on_metadata,
    f.StreamStats: streams.on_stream_stats,
    f.CreateSuperStream: superstreams.on_create_super_stream,
    f.DeleteSuperStream: superstreams.on_delete_super_stream,
    f.Partitions: superstreams.on_partitions,
    f.Route: superstreams.on_route,
    rf.Fence: replication.on_fence,
    rf.Assign: replication.on_assign,
    rf.ReplicaHello: replication.on_replica_hello,
    rf.ReplicaStart: replication.on_replica_start,
    rf.ReplicaAck: replication.on_replica_ack,
    rf.ReplicaContact: replication.on_replica_contact,
    rf.ReplicaSeal: replication.on_replica_seal,
    rf.ReplicaLearn: replication.on_replica_learn,
    rf.ReplicaLeave: replication.on_replica_leave,
    rf.SacJoin: replication.on_sac_join,
    rf.SacLeave: replication.on_sac_leave,
    rf.SacSteppedDown: replication.on_sac_stepped_down,
    rf.PolicySync: policies.on_policy_sync,
}
