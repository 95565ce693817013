"""The RabbitMQ Stream protocol, with no sockets and no files: the frames and commands
(``frames``, ``constants``, ``fields``), the frame splitter (``framing``), the Publish split and
the answers the broker makes (``publish``, ``answers``), and the connection handshake as pieces
that do no I/O: ``machine``, the server's side as a state table (the broker's adapter,
streamlet.broker.rabbitmq, runs it), ``client``, the client's side. The chunk a Deliver carries
is the storage format (streamlet.storage.chunk)."""

from .constants import Code, Key, OffsetType
from .frames import Command, FrameError, decode, encode
from .framing import FrameSplitter

__all__ = ["Code", "Command", "FrameError", "FrameSplitter", "Key", "OffsetType", "decode", "encode"]
