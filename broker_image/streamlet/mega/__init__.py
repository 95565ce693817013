"""The MEGA wire protocol (docs/protocols/mega.md): requests and responses, and the splitter
that cuts a byte stream into requests (MEGA has no length prefix). No sockets, no files."""

from .codec import (
    DEFAULT_MAX_PAYLOAD,
    DEFAULT_MAX_TOPIC,
    ErrorCode,
    FramingLost,
    MegaSplitter,
    MessageType,
    Request,
    Response,
    decode_request,
    decode_response,
    encode_error,
    encode_request,
    encode_success,
)

__all__ = [
    "DEFAULT_MAX_PAYLOAD", "DEFAULT_MAX_TOPIC", "ErrorCode", "FramingLost", "MegaSplitter",
    "MessageType", "Request", "Response", "decode_request", "decode_response", "encode_error",
    "encode_request", "encode_success",
]
