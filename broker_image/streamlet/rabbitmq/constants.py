"""Numbers of the RabbitMQ Stream protocol: command keys, response codes, offset types."""

from __future__ import annotations

from enum import IntEnum

RESPONSE_FLAG = 0x8000
#: RabbitMQ caps incoming frames at this size until Open succeeds.
PRE_OPEN_FRAME_MAX = 8192


class Key(IntEnum):
    DECLARE_PUBLISHER = 1
    PUBLISH = 2
    PUBLISH_CONFIRM = 3
    PUBLISH_ERROR = 4
    QUERY_PUBLISHER_SEQUENCE = 5
    DELETE_PUBLISHER = 6
    SUBSCRIBE = 7
    DELIVER = 8
    CREDIT = 9
    STORE_OFFSET = 10
    QUERY_OFFSET = 11
    UNSUBSCRIBE = 12
    CREATE = 13
    DELETE = 14
    METADATA = 15
    METADATA_UPDATE = 16
    PEER_PROPERTIES = 17
    SASL_HANDSHAKE = 18
    SASL_AUTHENTICATE = 19
    TUNE = 20
    OPEN = 21
    CLOSE = 22
    HEARTBEAT = 23
    ROUTE = 24
    PARTITIONS = 25
    CONSUMER_UPDATE = 26
    EXCHANGE_COMMAND_VERSIONS = 27
    STREAM_STATS = 28
    CREATE_SUPER_STREAM = 29
    DELETE_SUPER_STREAM = 30
    RESOLVE_OFFSET_SPEC = 31
    # streamlet's private replication commands (replica <-> leader, operator -> broker): a
    # range RabbitMQ does not use (its keys are 1-31), never sent to or accepted from clients
    REPLICA_HELLO = 0x7E01
    REPLICA_START = 0x7E02
    REPLICA_CHUNKS = 0x7E03
    REPLICA_ACK = 0x7E04
    REPLICA_COMMIT = 0x7E05
    FENCE = 0x7E06
    ASSIGN = 0x7E07
    # single-active-consumer groups of a replicated stream, decided at its leader
    SAC_JOIN = 0x7E08
    SAC_LEAVE = 0x7E09
    SAC_UPDATE = 0x7E0A
    SAC_STEPPED_DOWN = 0x7E0B
    # broker <-> broker and operator -> broker: the policy sets merged (0x7E0D-0x7E0F: free)
    POLICY_SYNC = 0x7E0C
    # driver -> member: in contact with its leader? its tail;
    # a leader's publishes stopped (or taken again) for a planned transfer
    REPLICA_CONTACT = 0x7E10
    REPLICA_SEAL = 0x7E11
    # driver -> a stream's leader: make a peer a learner (it catches up, its acks not counted);
    # driver -> a former member: drop your copy, you are no member of that epoch
    REPLICA_LEARN = 0x7E12
    REPLICA_LEAVE = 0x7E13


class Code(IntEnum):
    OK = 1
    STREAM_DOES_NOT_EXIST = 2
    SUBSCRIPTION_ID_ALREADY_EXISTS = 3
    SUBSCRIPTION_ID_DOES_NOT_EXIST = 4
    STREAM_ALREADY_EXISTS = 5
    STREAM_NOT_AVAILABLE = 6
    SASL_MECHANISM_NOT_SUPPORTED = 7
    AUTHENTICATION_FAILURE = 8
    SASL_ERROR = 9
    SASL_CHALLENGE = 10
    SASL_AUTHENTICATION_FAILURE_LOOPBACK = 11
    VIRTUAL_HOST_ACCESS_FAILURE = 12
    UNKNOWN_FRAME = 13
    FRAME_TOO_LARGE = 14
    INTERNAL_ERROR = 15
    ACCESS_REFUSED = 16
    PRECONDITION_FAILED = 17
    PUBLISHER_DOES_NOT_EXIST = 18
    NO_OFFSET = 19


class Role(IntEnum):
    """A member's role in an Assign."""

    LEADER = 1
    FOLLOWER = 2


#: A client property (PeerProperties) asking for streamlet's own keys in StreamStats' answer
#: (offsets, message count, size, retention, stored offsets and sequences: `streams info`).
#: Opt-in: counting messages reads every segment's chunk table, too much for clients (the
#: operator, the Spark source) that ask often.
STREAM_DETAILS = "streamlet-stream-details"

#: A client property (PeerProperties) a placement driver elected through a Kubernetes Lease
#: sends: its fencing token, the Lease's leaseTransitions when it took it (decimal). A member
#: refuses Fence, Assign, ReplicaSeal, ReplicaLearn and ReplicaLeave carrying a token below the
#: highest it has seen (streamlet.replication.requests.token_refusal).
DRIVER_TOKEN = "streamlet-driver-token"


#: The replication commands' range (docs/protocol.md): not for clients.
REPLICATION_KEYS = range(0x7E01, 0x7F00)


class OffsetType(IntEnum):
    FIRST = 1
    LAST = 2
    NEXT = 3
    OFFSET = 4
    TIMESTAMP = 5


#: Leader reference reported in Metadata when a stream has no known leader.
NO_LEADER = 0xFFFF
