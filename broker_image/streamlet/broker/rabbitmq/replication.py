"""The private replication commands (keys 0x7E01-0x7E07, 0x7E10-0x7E11, docs/protocol.md):
what the placement driver sends (Fence, Assign, ReplicaContact, ReplicaSeal) and what a follower's link sends its leader (ReplicaHello,
ReplicaStart, ReplicaAck). Each needs the ``configure`` permission on the stream: the driver's
and the replication user's, never an application's. The work is broker.replication.members'."""

from __future__ import annotations

from ...core.streams import Stream
from ...protocol import Code
from ...protocol import frames as f
from ...protocol.constants import Role as WireRole
from ..replication.member import Role
from ..replication.members import Refused
from .handshake import advertised
from .state import ConnectionState

_ROLES = {WireRole.LEADER: Role.LEADER, WireRole.FOLLOWER: Role.FOLLOWER}


def _configurable(conn: ConnectionState, name: str) -> Stream | Code:
    """The stream, or why this connection may not run replication commands on it."""
    stream = conn.streams.get(name)
    if stream is None:
        return Code.STREAM_DOES_NOT_EXIST
    return Code.ACCESS_REFUSED if conn.refused("configure", name) else stream


def on_fence(conn: ConnectionState, cmd: f.Fence) -> None:
    stream = _configurable(conn, cmd.stream)
    if isinstance(stream, Code):
        conn.send(f.FenceResponse(cmd.correlation_id, stream))
        return
    try:
        report = conn.broker.members.fence(stream, cmd.epoch)
    except Refused as e:
        conn.send(f.FenceResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE, e.epoch))
        return
    conn.send(f.FenceResponse(cmd.correlation_id, Code.OK, report.epoch, *report.tail,
                              report.epochs))


def on_assign(conn: ConnectionState, cmd: f.Assign) -> None:
    stream = _configurable(conn, cmd.stream)
    role = _ROLES.get(cmd.role)  # type: ignore[call-overload]
    if isinstance(stream, Code):
        code = stream
    elif role is None or not cmd.members:
        code = Code.PRECONDITION_FAILED
    else:
        leader = None if role is Role.LEADER else (cmd.leader_host, cmd.leader_port)
        try:
            conn.broker.members.assign(stream, cmd.epoch, role, leader or advertised(conn),
                                       tuple(cmd.members))
            code = Code.OK
        except Refused:
            code = Code.STREAM_NOT_AVAILABLE
    conn.send(f.AssignResponse(cmd.correlation_id, code))


def on_replica_hello(conn: ConnectionState, cmd: f.ReplicaHello) -> None:
    stream = _configurable(conn, cmd.stream)
    if isinstance(stream, Code):
        conn.send(f.ReplicaHelloResponse(cmd.correlation_id, stream))
        return
    try:
        report = conn.broker.members.hello(stream, cmd.epoch, cmd.member)
    except Refused as e:
        conn.send(f.ReplicaHelloResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE, e.epoch))
        return
    conn.replica_of = (stream, cmd.member)
    conn.send(f.ReplicaHelloResponse(cmd.correlation_id, Code.OK, report.epoch,
                                     stream.log.first_offset, report.epochs))


def on_replica_start(conn: ConnectionState, cmd: f.ReplicaStart) -> None:
    if conn.replica_of is None:
        conn.send(f.ReplicaStartResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
        return
    stream, member = conn.replica_of
    try:
        feed = conn.broker.members.start(
            stream, cmd.epoch, member, (cmd.tail_epoch, cmd.tail_chunk_id, cmd.next_offset), conn)
    except Refused:
        conn.send(f.ReplicaStartResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE))
        return
    conn.feeding = feed.leader
    conn.send(f.ReplicaStartResponse(cmd.correlation_id, Code.OK))
    feed.pump()


def on_replica_ack(conn: ConnectionState, cmd: f.ReplicaAck) -> None:
    if conn.feeding is not None and conn.replica_of is not None:
        conn.feeding.on_ack(conn.replica_of[1], cmd.epoch, cmd.chunk_id, cmd.next_offset)


def on_replica_contact(conn: ConnectionState, cmd: f.ReplicaContact) -> None:
    stream = _configurable(conn, cmd.stream)
    report = None if isinstance(stream, Code) else conn.broker.members.contact(stream)
    if isinstance(stream, Code) or report is None:
        code = stream if isinstance(stream, Code) else Code.PRECONDITION_FAILED  # not replicated
        conn.send(f.ReplicaContactResponse(cmd.correlation_id, code))
        return
    epoch, role, age = report
    wire = 0 if role is Role.FENCED else {Role.LEADER: WireRole.LEADER,
                                          Role.FOLLOWER: WireRole.FOLLOWER}[role]
    conn.send(f.ReplicaContactResponse(cmd.correlation_id, Code.OK, epoch, wire,
                                       -1 if age is None else int(age * 1000),
                                       *stream.log.tail()))


def on_replica_seal(conn: ConnectionState, cmd: f.ReplicaSeal) -> None:
    stream = _configurable(conn, cmd.stream)
    if isinstance(stream, Code):
        conn.send(f.ReplicaSealResponse(cmd.correlation_id, stream))
        return
    try:
        tail = conn.broker.members.seal(stream, cmd.epoch, bool(cmd.seal))
    except Refused:
        conn.send(f.ReplicaSealResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE))
        return
    conn.send(f.ReplicaSealResponse(cmd.correlation_id, Code.OK, *tail))


# --- single-active-consumer groups, decided at the leader (broker.replication.sac) -----------

def on_sac_join(conn: ConnectionState, cmd: f.SacJoin) -> None:
    """A member's consumer joins a group this broker decides, as the stream's leader in
    ``cmd.epoch``; the first join binds the connection to the stream and epoch."""
    stream = _configurable(conn, cmd.stream)
    link = conn.sac_link
    if isinstance(stream, Code):
        code = stream
    elif not conn.broker.members.leads(stream, cmd.epoch):
        code = Code.STREAM_NOT_AVAILABLE  # the member retries, or hears of a new epoch
    elif link is not None and (link.stream is not stream or link.epoch != cmd.epoch):
        code = Code.PRECONDITION_FAILED  # one stream and epoch per link
    else:
        assert conn.vhost is not None
        if link is None:
            link = conn.sac_link = conn.broker.members.sac.link(conn, stream, cmd.epoch,
                                                                conn.vhost.sac)
        conn.send(f.SacJoinResponse(cmd.correlation_id, Code.OK))
        link.join(cmd.consumer, cmd.group, cmd.partition_index)  # its SacUpdate follows the OK
        return
    conn.send(f.SacJoinResponse(cmd.correlation_id, code))


def on_sac_leave(conn: ConnectionState, cmd: f.SacLeave) -> None:
    if conn.sac_link is not None:
        conn.sac_link.leave(cmd.consumer)


def on_sac_stepped_down(conn: ConnectionState, cmd: f.SacSteppedDown) -> None:
    if conn.sac_link is not None:
        conn.sac_link.stepped_down(cmd.consumer)
