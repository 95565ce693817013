"""RabbitMQ's Stream protocol commands as typed values, by family, and the one entry point that
codes them all: :func:`encode` (a command to a whole frame, size included) and :func:`decode`
(one frame, without its size, to a command or a :class:`FrameError` with the response code).

The families are ``connection``, ``publishing``, ``consuming``, ``streams`` and ``superstreams``,
RabbitMQ's public catalogue, re-exported here; ``replication`` holds streamlet's own commands
between its brokers (keys 0x7E..), decoded here too but named only through that module. Each
family registers its commands in ``base.REGISTRY`` when imported, which this package does.
"""

from . import replication
from .base import Command, FrameError, SimpleResponse, decode, encode
from .connection import (
    Close,
    CloseResponse,
    CommandVersion,
    ExchangeCommandVersions,
    ExchangeCommandVersionsResponse,
    Heartbeat,
    Open,
    OpenResponse,
    PeerProperties,
    PeerPropertiesResponse,
    SaslAuthenticate,
    SaslAuthenticateResponse,
    SaslHandshake,
    SaslHandshakeResponse,
    Tune,
)
from .consuming import (
    ConsumerUpdate,
    ConsumerUpdateResponse,
    Credit,
    CreditResponse,
    Deliver,
    QueryOffset,
    QueryOffsetResponse,
    StoreOffset,
    Subscribe,
    SubscribeResponse,
    Unsubscribe,
    UnsubscribeResponse,
)
from .publishing import (
    DeclarePublisher,
    DeclarePublisherResponse,
    DeletePublisher,
    DeletePublisherResponse,
    Publish,
    PublishConfirm,
    PublishedMessage,
    PublishError,
    QueryPublisherSequence,
    QueryPublisherSequenceResponse,
)
from .streams import (
    BrokerInfo,
    Create,
    CreateResponse,
    Delete,
    DeleteResponse,
    Metadata,
    MetadataResponse,
    MetadataUpdate,
    ResolveOffsetSpec,
    ResolveOffsetSpecResponse,
    StreamMetadata,
    StreamStats,
    StreamStatsResponse,
)
from .superstreams import (
    CreateSuperStream,
    CreateSuperStreamResponse,
    DeleteSuperStream,
    DeleteSuperStreamResponse,
    Partitions,
    PartitionsResponse,
    Route,
    RouteResponse,
)

__all__ = [
    "BrokerInfo", "Close", "CloseResponse", "Command", "CommandVersion", "ConsumerUpdate",
    "ConsumerUpdateResponse", "Create", "CreateResponse", "CreateSuperStream",
    "CreateSuperStreamResponse", "Credit", "CreditResponse", "DeclarePublisher",
    "DeclarePublisherResponse", "Delete", "DeletePublisher", "DeletePublisherResponse",
    "DeleteResponse", "DeleteSuperStream", "DeleteSuperStreamResponse", "Deliver",
    "ExchangeCommandVersions", "ExchangeCommandVersionsResponse", "FrameError", "Heartbeat",
    "Metadata", "MetadataResponse", "MetadataUpdate", "Open", "OpenResponse", "Partitions",
    "PartitionsResponse", "PeerProperties", "PeerPropertiesResponse", "Publish", "PublishConfirm",
    "PublishError", "PublishedMessage", "QueryOffset", "QueryOffsetResponse",
    "QueryPublisherSequence", "QueryPublisherSequenceResponse", "ResolveOffsetSpec",
    "ResolveOffsetSpecResponse", "Route", "RouteResponse", "SaslAuthenticate",
    "SaslAuthenticateResponse", "SaslHandshake", "SaslHandshakeResponse", "SimpleResponse",
    "StoreOffset", "StreamMetadata", "StreamStats", "StreamStatsResponse", "Subscribe",
    "SubscribeResponse", "Tune", "Unsubscribe", "UnsubscribeResponse", "decode", "encode",
    "replication",
]
