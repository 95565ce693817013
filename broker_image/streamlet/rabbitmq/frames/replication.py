"""streamlet's own commands, not RabbitMQ's (keys 0x7E01-0x7E13, a range RabbitMQ does not
use): replication between a stream's members (ReplicaHello, ReplicaStart, ReplicaChunks,
ReplicaAck, ReplicaCommit), the placement driver's (Fence, Assign, ReplicaContact, ReplicaSeal,
ReplicaLearn, ReplicaLeave) and a member's single-active-consumer link to the stream's leader
(SacJoin, SacLeave, SacUpdate, SacSteppedDown). Between brokers and from the driver, never a client's; the same frame layout
and field codecs as RabbitMQ's commands, decoded by the same
:func:`streamlet.rabbitmq.frames.decode`."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from .. import fields as wire
from ..constants import Key
from ..fields import Reader
from .base import (
    BYTES,
    I32,
    I64,
    STR,
    U8,
    U16,
    U32,
    U64,
    Codec,
    Command,
    array,
    record,
    register,
    simple_response,
)

# Epochs are u64 (as in a chunk header), chunk ids i64 (-1: none), offsets u64. A replica opens
# one connection per stream it follows (as Osiris runs one reader per replica): ReplicaHello
# binds it to the stream. A refusal for a fenced member (an epoch older than the peer's) is
# code 6, STREAM_NOT_AVAILABLE, the epoch fields telling which side is behind.

#: An epoch vector: ``(epoch, last chunk id of that epoch)``, oldest first (Osiris's overview)
EPOCH_VECTOR = array(record(tuple, U64, I64))


@register
@dataclass(slots=True)
class ReplicaHello(Command):
    """Replica to leader: follow ``stream`` in ``epoch``; the replica's tail as it stands."""

    KEY: ClassVar[int] = Key.REPLICA_HELLO
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64, U16, U64, I64, U64)
    correlation_id: int
    stream: str
    epoch: int
    member: int
    tail_epoch: int
    tail_chunk_id: int
    next_offset: int


@register
@dataclass(slots=True)
class ReplicaHelloResponse(Command):
    """The leader's epoch, its first offset and its epoch vector: what the replica truncates by."""

    KEY: ClassVar[int] = Key.REPLICA_HELLO
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64, U64, EPOCH_VECTOR)
    correlation_id: int
    code: int
    epoch: int = 0
    first_offset: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)


@register
@dataclass(slots=True)
class ReplicaStart(Command):
    """Replica to leader, once truncated: its tail now; chunks flow from ``next_offset``. The
    leader checks that ``(tail_epoch, tail_chunk_id)`` is in its log (Osiris's
    ``init_data_reader``) and refuses otherwise."""

    KEY: ClassVar[int] = Key.REPLICA_START
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U64, U64, I64, U64)
    correlation_id: int
    epoch: int
    tail_epoch: int
    tail_chunk_id: int
    next_offset: int


ReplicaStartResponse = simple_response(Key.REPLICA_START, "ReplicaStartResponse")

_CHUNKS_HEAD = struct.Struct(">IHHQq")


@register
@dataclass(slots=True)
class ReplicaChunks(Command):
    """Leader to replica, no answer: whole chunks as stored (header, bloom, data, trailer),
    back to back, and the leader's commit point. The chunks are the rest of the frame, decoded
    as a view of it (no copy); the leader writes :meth:`prefix` and then the bytes (or
    sendfile), as Deliver's fast path does."""

    KEY: ClassVar[int] = Key.REPLICA_CHUNKS
    epoch: int
    committed_chunk_id: int
    chunks: bytes | memoryview

    def body(self) -> bytes:
        return wire.u64(self.epoch) + wire.i64(self.committed_chunk_id) + bytes(self.chunks)

    @classmethod
    def read(cls, r: Reader, version: int) -> ReplicaChunks:
        epoch, committed = r.u64(), r.i64()
        return cls(epoch, committed, r.rest_view())

    @staticmethod
    def prefix(epoch: int, committed_chunk_id: int, size: int) -> bytes:
        """The whole frame's head (size prefix included) for ``size`` bytes of chunks."""
        return _CHUNKS_HEAD.pack(20 + size, Key.REPLICA_CHUNKS, 1, epoch, committed_chunk_id)


@register
@dataclass(slots=True)
class ReplicaAck(Command):
    """Replica to leader, no answer: written up to this chunk, in this epoch."""

    KEY: ClassVar[int] = Key.REPLICA_ACK
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U64, I64, U64)
    epoch: int
    chunk_id: int
    next_offset: int


@register
@dataclass(slots=True)
class ReplicaCommit(Command):
    """Leader to replica, no answer: the commit point moved while no chunk was flowing."""

    KEY: ClassVar[int] = Key.REPLICA_COMMIT
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U64, I64)
    epoch: int
    committed_chunk_id: int


@register
@dataclass(slots=True)
class Fence(Command):
    """Operator to broker: raise ``stream``'s epoch to ``epoch`` (persisted before the answer),
    stop writing, fetching and acking; answer with the tail."""

    KEY: ClassVar[int] = Key.FENCE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64)
    correlation_id: int
    stream: str
    epoch: int


@register
@dataclass(slots=True)
class FenceResponse(Command):
    """The member's epoch now (higher than asked: it refused, code 6), its tail and epoch
    vector."""

    KEY: ClassVar[int] = Key.FENCE
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64, U64, I64, U64, EPOCH_VECTOR)
    correlation_id: int
    code: int
    epoch: int = 0
    tail_epoch: int = 0
    tail_chunk_id: int = -1
    next_offset: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)


@register
@dataclass(slots=True)
class Assign(Command):
    """Operator to broker: in ``epoch``, lead ``stream`` or follow the leader at host:port;
    ``members`` are the epoch's member set (pod ordinals)."""

    KEY: ClassVar[int] = Key.ASSIGN
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64, U8, STR, U32, array(U16))
    correlation_id: int
    stream: str
    epoch: int
    role: int  # constants.Role
    leader_host: str
    leader_port: int
    members: list[int] = field(default_factory=list)


AssignResponse = simple_response(Key.ASSIGN, "AssignResponse")


@register
@dataclass(slots=True)
class ReplicaContact(Command):
    """Placement driver to a member: are you in contact with ``stream``'s leader?"""

    KEY: ClassVar[int] = Key.REPLICA_CONTACT
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR)
    correlation_id: int
    stream: str


@register
@dataclass(slots=True)
class ReplicaContactResponse(Command):
    """The member's epoch and role (0 fenced, else constants.Role), how many milliseconds ago
    its link last heard from the leader (-1: no link; a leader sends one at least every half
    second), and its tail."""

    KEY: ClassVar[int] = Key.REPLICA_CONTACT
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64, U8, I64, U64, I64, U64)
    correlation_id: int
    code: int
    epoch: int = 0
    role: int = 0
    age_ms: int = -1
    tail_epoch: int = 0
    tail_chunk_id: int = -1
    next_offset: int = 0


@register
@dataclass(slots=True)
class ReplicaSeal(Command):
    """Placement driver to ``stream``'s leader in ``epoch``: stop taking publishes (``seal``
    1), its feeds and commits going on, for a planned transfer; or take them again (0)."""

    KEY: ClassVar[int] = Key.REPLICA_SEAL
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64, U8)
    correlation_id: int
    stream: str
    epoch: int
    seal: int


@register
@dataclass(slots=True)
class ReplicaSealResponse(Command):
    """6 when not that epoch's leader; else its tail once sealed (what it took is written)."""

    KEY: ClassVar[int] = Key.REPLICA_SEAL
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, U64, I64, U64)
    correlation_id: int
    code: int
    tail_epoch: int = 0
    tail_chunk_id: int = -1
    next_offset: int = 0


@register
@dataclass(slots=True)
class ReplicaLearn(Command):
    """Placement driver to ``stream``'s leader in ``epoch``: make ``member`` a learner (the
    stream created there with the leader's settings, the member assigned follower of this
    epoch without being in its member set: fed, its acks not counted). Answered once it is."""

    KEY: ClassVar[int] = Key.REPLICA_LEARN
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64, U16)
    correlation_id: int
    stream: str
    epoch: int
    member: int


ReplicaLearnResponse = simple_response(Key.REPLICA_LEARN, "ReplicaLearnResponse")


@register
@dataclass(slots=True)
class ReplicaLeave(Command):
    """Placement driver to a former member: ``epoch``'s member set does not hold you, delete
    your copy of ``stream`` here only. Refused (6) by a member of that epoch or a later one."""

    KEY: ClassVar[int] = Key.REPLICA_LEAVE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64)
    correlation_id: int
    stream: str
    epoch: int


ReplicaLeaveResponse = simple_response(Key.REPLICA_LEAVE, "ReplicaLeaveResponse")


# A member's single-active-consumer link to the stream's leader (one connection per stream and
# epoch, bound by its first SacJoin): the member's consumers are ``consumer`` ids of its own.


@register
@dataclass(slots=True)
class SacJoin(Command):
    """Member to leader: its consumer joins group ``group`` of ``stream`` in ``epoch``;
    ``partition_index`` is the stream's position in its super stream (-1: none)."""

    KEY: ClassVar[int] = Key.SAC_JOIN
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, STR, U64, U32, STR, I32)
    correlation_id: int
    stream: str
    epoch: int
    consumer: int
    group: str
    partition_index: int = -1


SacJoinResponse = simple_response(Key.SAC_JOIN, "SacJoinResponse")


@register
@dataclass(slots=True)
class SacLeave(Command):
    """Member to leader, no answer: its consumer left (unsubscribed, its connection closed)."""

    KEY: ClassVar[int] = Key.SAC_LEAVE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32,)
    consumer: int


@register
@dataclass(slots=True)
class SacUpdate(Command):
    """Leader to member, no answer: activate the consumer (active=1) or step it down (0)."""

    KEY: ClassVar[int] = Key.SAC_UPDATE
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U8)
    consumer: int
    active: int


@register
@dataclass(slots=True)
class SacSteppedDown(Command):
    """Member to leader, no answer: the consumer told to step down did (its client answered)."""

    KEY: ClassVar[int] = Key.SAC_STEPPED_DOWN
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32,)
    consumer: int


@register
@dataclass(slots=True)
class PolicySync(Command):
    """Broker to peer (or the operator to a broker): ``policies`` is a JSON list of policy
    entries (broker/policies): the receiver takes each newer than its own (version 0: stamp
    it as a change made there) and answers with every entry it holds then."""

    KEY: ClassVar[int] = Key.POLICY_SYNC
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, BYTES)
    correlation_id: int
    policies: bytes


@register
@dataclass(slots=True)
class PolicySyncResponse(Command):
    KEY: ClassVar[int] = Key.POLICY_SYNC
    RESPONSE: ClassVar[bool] = True
    LAYOUT: ClassVar[tuple[Codec, ...]] = (U32, U16, BYTES)
    correlation_id: int
    code: int
    policies: bytes = b""
