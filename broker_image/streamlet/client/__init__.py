"""An asyncio client for the RabbitMQ Stream protocol, built on :mod:`streamlet.rabbitmq`.

See docs/client.md. Everything public is importable from here."""

from .client import Client, connect
from .connection import Connection
from .consumer import Consumer, Message
from .errors import ConnectionClosed, StreamletError
from .offsets import OffsetSpec
from .producer import Producer, PublishFailed

__all__ = [
    "Client", "Connection", "ConnectionClosed", "Consumer", "Message", "OffsetSpec", "Producer",
    "PublishFailed", "StreamletError", "connect",
]
