"""The one exception type of the client, carrying the protocol's response code."""

from __future__ import annotations

import contextlib

from ..rabbitmq import Code


class StreamletError(Exception):
    """A request failed: ``code`` is the protocol's response code (a :class:`Code` when known)."""

    def __init__(self, code: Code | int, message: str = "") -> None:
        with contextlib.suppress(ValueError):  # a code this client does not know: keep the int
            code = Code(code)
        self.code = code
        self.message = message or (code.name.lower().replace("_", " ") if isinstance(code, Code) else "")
        name = code.name if isinstance(code, Code) else str(code)
        super().__init__(f"{name}: {self.message}" if self.message else name)


class ConnectionClosed(StreamletError):
    """The connection is gone: closed by the server (``code`` is its Close code), by us, or lost
    (``code`` is STREAM_NOT_AVAILABLE, so callers retrying on that code also retry here)."""
