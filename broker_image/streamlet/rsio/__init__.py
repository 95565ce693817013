"""Reactive Streams IO (docs/protocols/reactive-streams.md): its frames, the splitter that cuts a
byte stream into them, and the publisher strings of subscribe. No sockets, no files."""

from .codec import (
    DEFAULT_MAX_ELEMENT,
    EXT_OFFSETS,
    FRAME_OVERHEAD,
    VERSION,
    Cancel,
    FramingLost,
    Goodbye,
    Hello,
    Malformed,
    Message,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Position,
    Request,
    RsioSplitter,
    Subscribe,
    Subscribed,
    Type,
    decode,
    encode,
    iter_frames,
    varint,
)
from .publisher import BadPublisher, PublisherSpec, format_publisher, parse

__all__ = [
    "DEFAULT_MAX_ELEMENT", "EXT_OFFSETS", "FRAME_OVERHEAD", "VERSION", "BadPublisher", "Cancel",
    "FramingLost", "Goodbye", "Hello", "Malformed", "Message", "OnComplete", "OnError", "OnNext",
    "OnNextLastPart", "OnNextPacked", "OnNextPart", "Position", "PublisherSpec", "Request",
    "RsioSplitter", "Subscribe", "Subscribed", "Type", "decode", "encode", "format_publisher",
    "iter_frames", "parse", "varint",
]
