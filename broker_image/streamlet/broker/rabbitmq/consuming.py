"""Consuming: Subscribe (single active consumers included), Credit, Unsubscribe, the answer to
a ConsumerUpdate, and the offsets: StoreOffset, QueryOffset, ResolveOffsetSpec. Cursors and
delivery are the core's (streamlet.core.subscription)."""

from __future__ import annotations

from ...core.offsets import resolve
from ...core.subscription import Subscription
from ...rabbitmq import Code, OffsetType
from ...rabbitmq import frames as f
from .filtering import matcher_from
from .leader import forward, route
from .offsets import offset_spec
from .state import ConnectionState


def on_subscribe(conn: ConnectionState, cmd: f.Subscribe) -> None:
    stream = conn.streams.get(cmd.stream)
    props = cmd.properties
    spec = offset_spec(cmd.offset_type, cmd.offset)
    single_active = props.get("single-active-consumer", "false").lower() == "true"
    if stream is None:
        code = conn.missing(cmd.stream)
    elif conn.refused("read", cmd.stream):
        code = Code.ACCESS_REFUSED
    elif cmd.subscription_id in conn.subscriptions:
        code = Code.SUBSCRIPTION_ID_ALREADY_EXISTS
    elif spec is None:
        code = Code.PRECONDITION_FAILED
    elif single_active and not props.get("name"):
        code = Code.PRECONDITION_FAILED  # a single active consumer needs its group's name
    else:
        code = Code.OK
    if code != Code.OK or stream is None or spec is None:
        conn.send(f.SubscribeResponse(cmd.correlation_id, code))
        return
    start = resolve(stream, spec)
    sub = Subscription(conn, cmd.subscription_id, stream, start, cmd.credit, props)
    sub.matcher = matcher_from(props)
    sub.active = not single_active  # a single active consumer waits for its ConsumerUpdate
    conn.subscriptions[cmd.subscription_id] = sub
    stream.attach_reader(sub)
    conn.send(f.SubscribeResponse(cmd.correlation_id, Code.OK))
    if single_active:
        _join(conn, sub, props["name"], _partition_index(conn, props, cmd.stream))
    else:
        sub.pump()


def _join(conn: ConnectionState, sub: Subscription, name: str, partition_index: int) -> None:
    """A single active consumer joins its group: decided here for a stream with one copy, at
    the leader for a replicated one (broker.replication.sac)."""
    assert conn.vhost is not None
    member = conn.broker.members.get(sub.stream)
    if member is None:
        conn.vhost.sac.join(sub, name, partition_index)
    else:
        conn.broker.members.sac.join(sub, name, partition_index, conn.vhost.sac, conn.vhost.name,
                                     member.state)


def _partition_index(conn: ConnectionState, props: dict[str, str], stream: str) -> int:
    """The stream's position in the ``super-stream`` property's super stream, else -1."""
    assert conn.vhost is not None
    ss = conn.vhost.superstreams.get(props.get("super-stream", ""))
    return ss.partitions.index(stream) if ss is not None and stream in ss.partitions else -1


def on_consumer_update_response(conn: ConnectionState, cmd: f.ConsumerUpdateResponse) -> None:
    pending = conn.pending_updates.pop(cmd.correlation_id, None)
    if pending is None:
        return
    sub, activated = pending
    if conn.subscriptions.get(sub.id) is not sub or conn.vhost is None:
        return  # unsubscribed meanwhile (the group already moved on)
    if not activated:
        conn.vhost.sac.stepped_down(sub)
        return
    if not conn.vhost.sac.is_active(sub):
        return  # told to step down before this answer came
    spec = offset_spec(cmd.offset_type, cmd.offset)
    if cmd.code == Code.OK and spec is not None:
        sub.cursor = resolve(sub.stream, spec)
    # offset type 0 (or an error answer): start where the subscription's own spec said
    sub.active = True
    sub.pump()


def on_credit(conn: ConnectionState, cmd: f.Credit) -> None:
    sub = conn.subscriptions.get(cmd.subscription_id)
    if sub is None:
        conn.send(f.CreditResponse(Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, cmd.subscription_id))
        return
    sub.credit = min(sub.credit + cmd.credit, 0xFFFF)
    sub.pump()


def on_unsubscribe(conn: ConnectionState, cmd: f.Unsubscribe) -> None:
    sub = conn.subscriptions.get(cmd.subscription_id)
    if sub is None:
        conn.send(f.UnsubscribeResponse(cmd.correlation_id, Code.SUBSCRIPTION_ID_DOES_NOT_EXIST))
        return
    conn.send(f.UnsubscribeResponse(cmd.correlation_id, Code.OK))
    conn.drop_subscription(sub)


def on_store_offset(conn: ConnectionState, cmd: f.StoreOffset) -> None:
    stream = conn.streams.get(cmd.stream)
    if stream is None or not cmd.reference or len(cmd.reference.encode()) > 255:
        return  # StoreOffset has no answer; RabbitMQ ignores these too
    if conn.refused("read", cmd.stream):
        return
    where = route(conn, stream)
    if where is None:
        stream.store_offset(cmd.reference, cmd.offset)
    elif not isinstance(where, Code):  # a follower's log takes only what its leader sends
        forward(conn, where, f.StoreOffset(cmd.reference, cmd.stream, cmd.offset))


def on_query_offset(conn: ConnectionState, cmd: f.QueryOffset) -> None:
    stream = conn.streams.get(cmd.stream)
    offset = None
    if stream is None:
        code = Code.STREAM_DOES_NOT_EXIST
    elif conn.refused("read", cmd.stream):
        code = Code.ACCESS_REFUSED
    else:
        where = route(conn, stream)
        if isinstance(where, Code):
            code = where
        elif where is not None:
            forward(conn, where, f.QueryOffset(0, cmd.reference, cmd.stream), lambda r: (
                f.QueryOffsetResponse(cmd.correlation_id, r.code, r.offset) if r is not None
                else f.QueryOffsetResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE, 0)),
                f.QueryOffsetResponse)
            return
        else:
            offset = stream.log.offsets.get(cmd.reference)
            code = Code.NO_OFFSET if offset is None else Code.OK
    conn.send(f.QueryOffsetResponse(cmd.correlation_id, code, offset or 0))


def on_resolve_offset_spec(conn: ConnectionState, cmd: f.ResolveOffsetSpec) -> None:
    stream = conn.streams.get(cmd.stream)
    spec = offset_spec(cmd.offset_type, cmd.offset)
    if stream is None:
        code = Code.STREAM_DOES_NOT_EXIST
    elif conn.refused("read", cmd.stream):
        code = Code.ACCESS_REFUSED
    elif spec is None:
        code = Code.PRECONDITION_FAILED
    else:
        offset = resolve(stream, spec)
        conn.send(f.ResolveOffsetSpecResponse(cmd.correlation_id, Code.OK, OffsetType.OFFSET, offset))
        return
    conn.send(f.ResolveOffsetSpecResponse(cmd.correlation_id, code))
