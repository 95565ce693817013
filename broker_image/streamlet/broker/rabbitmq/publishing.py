"""Publishing: DeclarePublisher, Publish (the hot path, parsed without the generic decoder),
QueryPublisherSequence, DeletePublisher. Deduplication and confirms are the core's; publishers
on a stream this broker follows are passed on to its leader (broker.replication.relay)."""

from __future__ import annotations

import struct

from ...core.batch import PublishBatch
from ...core.streams import Publisher
from ...rabbitmq import Code, Key
from ...rabbitmq import frames as f
from ...rabbitmq.fields import Malformed
from ...rabbitmq.publish import parse_publish
from ..directory import Address
from ..replication.relay import Relay
from .leader import forward, route
from .state import ConnectionState


def on_declare_publisher(conn: ConnectionState, cmd: f.DeclarePublisher) -> None:
    stream = conn.streams.get(cmd.stream)
    if stream is None:
        code = conn.missing(cmd.stream)
    elif conn.refused("write", cmd.stream):
        code = Code.ACCESS_REFUSED
    elif cmd.publisher_id in conn.publishers or cmd.publisher_id in conn.relayed:
        code = Code.PRECONDITION_FAILED
    elif isinstance(leader := route(conn, stream), tuple):  # a follower: the leader takes it
        _relay(conn, leader, cmd)
        return
    elif stream.sealed:
        code = Code.STREAM_NOT_AVAILABLE  # moved, or fenced: Metadata names where it is
    elif cmd.reference is not None and (
        len(cmd.reference.encode()) > 256
        or stream.reference_taken(cmd.reference)
    ):
        code = Code.PRECONDITION_FAILED
    else:
        pub = Publisher(cmd.publisher_id, cmd.reference or None, stream, conn)
        conn.publishers[cmd.publisher_id] = pub
        conn.moved_publishers.discard(cmd.publisher_id)
        stream.attach_publisher(pub)
        code = Code.OK
    conn.send(f.DeclarePublisherResponse(cmd.correlation_id, code))


def _relay(conn: ConnectionState, leader: Address, cmd: f.DeclarePublisher) -> None:
    relay = conn.relays.get(leader)
    if relay is None:
        assert conn.vhost is not None
        relay = conn.relays[leader] = Relay(conn, leader, conn.vhost.name,
                                            conn.broker.forwarder.credentials)

    async def declare() -> None:
        code = await relay.declare(cmd)
        if code == Code.OK and not conn.closing:
            conn.relayed[cmd.publisher_id] = relay
            conn.moved_publishers.discard(cmd.publisher_id)
        conn.send(f.DeclarePublisherResponse(cmd.correlation_id, code))

    conn.spawn(declare(), "DeclarePublisher for the leader")


def on_publish(conn: ConnectionState, frame: memoryview) -> None:
    version = frame[2] << 8 | frame[3]
    try:
        batch = PublishBatch(*parse_publish(frame[4:], version))
    except Malformed as e:
        conn.reject(Key.PUBLISH, version, None, Code.UNKNOWN_FRAME, f"malformed Publish: {e}")
        return
    pub = conn.publishers.get(batch.publisher_id)
    if pub is None and (relay := conn.relayed.get(batch.publisher_id)) is not None:
        relay.publish(frame)
        return
    if pub is None:
        ids = list(struct.unpack(f">{batch.count}Q", batch.ids))
        moved = batch.publisher_id in conn.moved_publishers
        conn.send_publish_error(batch.publisher_id, ids, Code.STREAM_NOT_AVAILABLE if moved
                                else Code.PUBLISHER_DOES_NOT_EXIST)
        return
    pub.stream.publish(pub, batch)


def on_query_publisher_sequence(conn: ConnectionState, cmd: f.QueryPublisherSequence) -> None:
    stream = conn.streams.get(cmd.stream)
    if stream is None:
        code, sequence = Code.STREAM_DOES_NOT_EXIST, 0
    elif conn.refused("read", cmd.stream):
        code, sequence = Code.ACCESS_REFUSED, 0
    elif isinstance(where := route(conn, stream), Code):
        code, sequence = where, 0
    elif where is not None:  # the leader knows the last sequence, pending writes included
        forward(conn, where, f.QueryPublisherSequence(0, cmd.reference, cmd.stream), lambda r: (
            f.QueryPublisherSequenceResponse(cmd.correlation_id, r.code, r.sequence)
            if r is not None else f.QueryPublisherSequenceResponse(
                cmd.correlation_id, Code.STREAM_NOT_AVAILABLE, 0)),
            f.QueryPublisherSequenceResponse)
        return
    else:
        code, sequence = Code.OK, stream.sequences.get(cmd.reference, 0)
    conn.send(f.QueryPublisherSequenceResponse(cmd.correlation_id, code, sequence))


def on_delete_publisher(conn: ConnectionState, cmd: f.DeletePublisher) -> None:
    relay = conn.relayed.pop(cmd.publisher_id, None)
    if relay is not None:
        async def delete() -> None:
            conn.send(f.DeletePublisherResponse(cmd.correlation_id, await relay.delete(
                cmd.publisher_id)))

        conn.spawn(delete(), "DeletePublisher for the leader")
        return
    pub = conn.publishers.pop(cmd.publisher_id, None)
    if pub is None and cmd.publisher_id in conn.moved_publishers:
        conn.moved_publishers.discard(cmd.publisher_id)  # already dropped by the move
        code = Code.OK
    elif pub is None:
        code = Code.PUBLISHER_DOES_NOT_EXIST
    else:
        pub.stream.detach_publisher(pub)  # confirms of what it sent go out before the answer
        code = Code.OK
    conn.send(f.DeletePublisherResponse(cmd.correlation_id, code))
