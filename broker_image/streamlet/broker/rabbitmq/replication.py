"""The private replication commands (keys 0x7E01-0x7E0B, 0x7E10-0x7E13, docs/protocol.md):
the placement driver's (Fence, Assign, ReplicaContact, ReplicaSeal, ReplicaLearn,
ReplicaLeave), a follower's link's
(ReplicaHello, ReplicaStart, ReplicaAck) and a member's single-active-consumer link's.

Authorised by identity, never by a permission: only the replication user or the placement
driver's (``cluster.driver_user``) may send them, anyone else is answered 16 (ACCESS_REFUSED).
A request no member takes (broker.replication.members.Invalid) is answered 17
(PRECONDITION_FAILED) before anything is saved; a driver's with a stale fencing token, 16.
The work is broker.replication.members'.
"""

from __future__ import annotations

import logging

from ...core.streams import Stream
from ...rabbitmq import Code
from ...rabbitmq import frames as f
from ...rabbitmq.constants import DRIVER_TOKEN
from ...rabbitmq.constants import Role as WireRole
from ...rabbitmq.frames import replication as rf
from ..arguments import create_arguments
from ..replication.create import make_learner
from ..replication.member import Role
from ..replication.members import Invalid, Refused
from .state import ConnectionState

log = logging.getLogger("streamlet.broker")

_ROLES = {WireRole.LEADER: Role.LEADER, WireRole.FOLLOWER: Role.FOLLOWER}


def cluster_identity(conn: ConnectionState) -> bool:
    """Whether this connection is logged in as the replication or the placement driver's user."""
    replication = conn.broker.peer_login.user
    return conn.user is not None and conn.user in (replication,
                                                   conn.broker.config.driver_user or replication)


def trusted(conn: ConnectionState, what: str) -> bool:
    """Whether this connection's user may send replication commands (logged when not)."""
    if cluster_identity(conn):
        return True
    log.warning("connection %s: user %s refused %s: only the replication and placement driver "
                "users send replication commands", conn.peer, conn.user, what)
    return False


def _target(conn: ConnectionState, cmd: f.Command, name: str) -> Stream | Code:
    """The stream, or why this connection may not run ``cmd`` on it."""
    if not trusted(conn, type(cmd).__name__):
        return Code.ACCESS_REFUSED
    stream = conn.streams.get(name)
    if stream is None:
        return Code.STREAM_NOT_AVAILABLE if conn.streams.unreadable_reason(name) else \
            Code.STREAM_DOES_NOT_EXIST
    return stream


def _driven(conn: ConnectionState, cmd: f.Command, name: str) -> Stream | Code:
    """As ``_target``, for the placement driver's commands that change a member: refused
    (ACCESS_REFUSED, logged and counted) when they carry a fencing token below the highest this
    broker has seen (broker.replication.fencing)."""
    what = type(cmd).__name__
    if not trusted(conn, what):
        return Code.ACCESS_REFUSED
    why = conn.broker.driver_fencing.admit(conn.client_properties.get(DRIVER_TOKEN), what)
    if why is not None:
        log.warning("stream %s: %s from %s refused: %s", name, what, conn.peer, why)
        return Code.ACCESS_REFUSED
    return _target(conn, cmd, name)


def _refuse_silent(conn: ConnectionState, cmd: f.Command) -> bool:
    """For a command without an answer: close the connection of a user who may not send it."""
    if trusted(conn, type(cmd).__name__):
        return False
    conn.fail(Code.ACCESS_REFUSED, f"{type(cmd).__name__}: not the replication user")
    return True


def on_fence(conn: ConnectionState, cmd: rf.Fence) -> None:
    stream = _driven(conn, cmd, cmd.stream)
    if isinstance(stream, Code):
        conn.send(rf.FenceResponse(cmd.correlation_id, stream))
        return
    try:
        report = conn.broker.members.fence(stream, cmd.epoch)
    except Invalid:
        conn.send(rf.FenceResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
        return
    except Refused as e:
        conn.send(rf.FenceResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE, e.epoch))
        return
    conn.send(rf.FenceResponse(cmd.correlation_id, Code.OK, report.epoch, *report.tail,
                              report.epochs))


def on_assign(conn: ConnectionState, cmd: rf.Assign) -> None:
    stream = _driven(conn, cmd, cmd.stream)
    role = _ROLES.get(cmd.role)  # type: ignore[call-overload]
    if isinstance(stream, Code):
        code = stream
    elif role is None:
        log.warning("stream %s: Assign refused: role %d is neither leader (1) nor follower (2)",
                    cmd.stream, cmd.role)
        code = Code.PRECONDITION_FAILED
    else:
        try:
            conn.broker.members.assign(stream, cmd.epoch, role,
                                       (cmd.leader_host, cmd.leader_port), tuple(cmd.members))
            code = Code.OK
        except Invalid:
            code = Code.PRECONDITION_FAILED
        except Refused:
            code = Code.STREAM_NOT_AVAILABLE
    conn.send(rf.AssignResponse(cmd.correlation_id, code))


def on_replica_hello(conn: ConnectionState, cmd: rf.ReplicaHello) -> None:
    stream = _target(conn, cmd, cmd.stream)
    if isinstance(stream, Code):
        conn.send(rf.ReplicaHelloResponse(cmd.correlation_id, stream))
        return
    try:
        report = conn.broker.members.hello(stream, cmd.epoch, cmd.member)
    except Refused as e:
        conn.send(rf.ReplicaHelloResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE, e.epoch))
        return
    conn.replica_of = (stream, cmd.member)
    conn.send(rf.ReplicaHelloResponse(cmd.correlation_id, Code.OK, report.epoch,
                                     stream.log.first_offset, report.epochs))


def on_replica_start(conn: ConnectionState, cmd: rf.ReplicaStart) -> None:
    if not trusted(conn, "ReplicaStart"):
        conn.send(rf.ReplicaStartResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
        return
    if conn.replica_of is None:
        conn.send(rf.ReplicaStartResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
        return
    stream, member = conn.replica_of
    try:
        feed = conn.broker.members.start(
            stream, cmd.epoch, member, (cmd.tail_epoch, cmd.tail_chunk_id, cmd.next_offset), conn)
    except Refused:
        conn.send(rf.ReplicaStartResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE))
        return
    conn.feeding = feed.leader
    conn.send(rf.ReplicaStartResponse(cmd.correlation_id, Code.OK))
    feed.pump()


def on_replica_ack(conn: ConnectionState, cmd: rf.ReplicaAck) -> None:
    if _refuse_silent(conn, cmd):
        return
    if conn.feeding is not None and conn.replica_of is not None:
        conn.feeding.on_ack(conn.replica_of[1], cmd.epoch, cmd.chunk_id, cmd.next_offset)


def on_replica_contact(conn: ConnectionState, cmd: rf.ReplicaContact) -> None:
    stream = _target(conn, cmd, cmd.stream)
    report = None if isinstance(stream, Code) else conn.broker.members.contact(stream)
    if isinstance(stream, Code) or report is None:
        code = stream if isinstance(stream, Code) else Code.PRECONDITION_FAILED  # not replicated
        conn.send(rf.ReplicaContactResponse(cmd.correlation_id, code))
        return
    epoch, role, age = report
    wire = 0 if role is Role.FENCED else {Role.LEADER: WireRole.LEADER,
                                          Role.FOLLOWER: WireRole.FOLLOWER}[role]
    conn.send(rf.ReplicaContactResponse(cmd.correlation_id, Code.OK, epoch, wire,
                                       -1 if age is None else int(age * 1000),
                                       *stream.log.tail()))


def on_replica_seal(conn: ConnectionState, cmd: rf.ReplicaSeal) -> None:
    stream = _driven(conn, cmd, cmd.stream)
    if isinstance(stream, Code):
        conn.send(rf.ReplicaSealResponse(cmd.correlation_id, stream))
        return
    if not conn.broker.members.in_cluster:
        log.warning("stream %s: ReplicaSeal refused: this broker has no [cluster] peers",
                    cmd.stream)
        conn.send(rf.ReplicaSealResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
        return
    try:
        tail = conn.broker.members.seal(stream, cmd.epoch, bool(cmd.seal))
    except Refused:
        conn.send(rf.ReplicaSealResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE))
        return
    conn.send(rf.ReplicaSealResponse(cmd.correlation_id, Code.OK, *tail))


# --- single-active-consumer groups, decided at the leader (broker.replication.sac) -----------

def on_sac_join(conn: ConnectionState, cmd: rf.SacJoin) -> None:
    """A member's consumer joins a group this broker decides, as the stream's leader in
    ``cmd.epoch``; the first join binds the connection to the stream and epoch."""
    stream = _target(conn, cmd, cmd.stream)
    link = conn.sac_link
    if isinstance(stream, Code):
        code = stream
    elif not conn.broker.members.leads(stream, cmd.epoch):
        conn.broker.members.claimed_here(stream, cmd.epoch, "SacJoin")
        code = Code.STREAM_NOT_AVAILABLE  # the member retries, or hears of a new epoch
    elif link is not None and (link.stream is not stream or link.epoch != cmd.epoch):
        code = Code.PRECONDITION_FAILED  # one stream and epoch per link
    else:
        assert conn.vhost is not None
        if link is None:
            link = conn.sac_link = conn.broker.members.sac.link(conn, stream, cmd.epoch,
                                                                conn.vhost.sac)
        conn.send(rf.SacJoinResponse(cmd.correlation_id, Code.OK))
        link.join(cmd.consumer, cmd.group, cmd.partition_index)  # its SacUpdate follows the OK
        return
    conn.send(rf.SacJoinResponse(cmd.correlation_id, code))


def on_sac_leave(conn: ConnectionState, cmd: rf.SacLeave) -> None:
    if _refuse_silent(conn, cmd):
        return
    if conn.sac_link is not None:
        conn.sac_link.leave(cmd.consumer)


def on_sac_stepped_down(conn: ConnectionState, cmd: rf.SacSteppedDown) -> None:
    if _refuse_silent(conn, cmd):
        return
    if conn.sac_link is not None:
        conn.sac_link.stepped_down(cmd.consumer)


def on_replica_learn(conn: ConnectionState, cmd: rf.ReplicaLearn) -> None:
    """Make a peer a learner of a stream this broker leads (answered once it follows)."""
    stream = _driven(conn, cmd, cmd.stream)
    cluster = conn.broker.cluster
    if isinstance(stream, Code):
        conn.send(rf.ReplicaLearnResponse(cmd.correlation_id, stream))
        return
    try:
        if cluster is None:
            raise Invalid("this broker has no [cluster] peers")
        leader, members = conn.broker.members.learner(stream, cmd.epoch, cmd.member)
    except Invalid as e:
        log.warning("stream %s: ReplicaLearn of member %d refused: %s", cmd.stream, cmd.member, e)
        conn.send(rf.ReplicaLearnResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
        return
    except Refused:
        conn.send(rf.ReplicaLearnResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE))
        return
    assert conn.vhost is not None
    vhost, arguments = conn.vhost.name, create_arguments(stream.settings)

    async def learn() -> None:
        try:
            await make_learner(cluster, vhost, cmd.stream, arguments, cmd.member, cmd.epoch,
                               leader, members)
            code = Code.OK
        except Exception as e:  # the member's problem: the driver asks again
            log.warning("stream %s: member %d cannot become a learner: %s", cmd.stream,
                        cmd.member, e)
            code = Code.STREAM_NOT_AVAILABLE
        conn.send(rf.ReplicaLearnResponse(cmd.correlation_id, code))

    conn.spawn(learn(), f"learner {cmd.member} of {cmd.stream!r}")


def on_replica_leave(conn: ConnectionState, cmd: rf.ReplicaLeave) -> None:
    """A former member drops its copy (this broker only: nothing is passed on)."""
    stream = _driven(conn, cmd, cmd.stream)
    if isinstance(stream, Code):
        conn.send(rf.ReplicaLeaveResponse(cmd.correlation_id, stream))
        return
    try:
        conn.broker.members.leave(stream, cmd.epoch)
    except Invalid as e:
        log.warning("stream %s: ReplicaLeave refused: %s", cmd.stream, e)
        conn.send(rf.ReplicaLeaveResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
        return
    except Refused as e:
        log.warning("stream %s: ReplicaLeave in epoch %d refused: %s", cmd.stream, cmd.epoch, e)
        conn.send(rf.ReplicaLeaveResponse(cmd.correlation_id, Code.STREAM_NOT_AVAILABLE))
        return
    assert conn.vhost is not None
    gone = conn.broker.delete_stream(conn.vhost, cmd.stream)
    log.info("stream %s: no member of epoch %d: copy deleted here", cmd.stream, cmd.epoch)
    conn.send(rf.ReplicaLeaveResponse(cmd.correlation_id, Code.OK))
    if gone is not None:
        conn.broker.stream_gone(gone)
