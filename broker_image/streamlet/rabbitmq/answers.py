"""Error answers: a request refused with a code, in the layout of that request's response."""

from __future__ import annotations

import struct
from collections.abc import Callable

from . import frames as f
from .constants import NO_LEADER, RESPONSE_FLAG, Code, Key
from .frames import replication as rf

_ERROR_RESPONSE = struct.Struct(">IHHIH")
#: The requests whose response carries more than a code: that response with the code and its
#: other fields empty or zero, so that any decoder reads it (the generic correlation-id-and-code
#: body would be a truncated frame for these).
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
    Key.REPLICA_HELLO: lambda c, code: rf.ReplicaHelloResponse(c, code),
    Key.FENCE: lambda c, code: rf.FenceResponse(c, code),
    Key.REPLICA_CONTACT: lambda c, code: rf.ReplicaContactResponse(c, code),
    Key.REPLICA_SEAL: lambda c, code: rf.ReplicaSealResponse(c, code),
    Key.REPLICA_LEARN: lambda c, code: rf.ReplicaLearnResponse(c, code),
    Key.REPLICA_LEAVE: lambda c, code: rf.ReplicaLeaveResponse(c, code),
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
