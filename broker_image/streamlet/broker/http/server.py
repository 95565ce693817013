"""A minimal HTTP/1.x server on the broker's own event loop: no thread, so an answer reads the
broker's state between two events, never during one.

One request per connection (``Connection: close``), over TLS on a socket started with a
context; a TLS handshake, or a head, past HEAD_LIMIT or slower than REQUEST_TIMEOUT_S closes
the connection unanswered; a body up to BODY_LIMIT is handed to the
page, a longer one answered 413 (chunked: 411) and what follows drained for a while before the
close. At most MAX_CONNECTIONS open at once (the next is answered 503), apart from the stream
listeners' limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from ssl import SSLContext

from ..listening import listen_error, reason
from .messages import Request, Response, body_length, parse_head, render

log = logging.getLogger("streamlet.broker")

HEAD_LIMIT = 8192
BODY_LIMIT = 64 << 10
REQUEST_TIMEOUT_S = 10.0
#: after refusing a body: what is read and dropped at most before the close
LINGER_BYTES = 8 << 20
LINGER_S = 5.0
#: connections open at once on one HTTP listener (a scraper and a few API clients need a few)
MAX_CONNECTIONS = 64

Answer = Callable[[Request], Response]


class HttpServer:
    """Serves ``answer(request)`` on each socket it starts (``host``:``port``, plain or TLS);
    ``what`` names it in the log. MAX_CONNECTIONS counts the connections of all its sockets."""

    def __init__(self, answer: Answer, what: str, max_connections: int = MAX_CONNECTIONS) -> None:
        self.answer = answer
        self.what = what
        self.max_connections = max_connections
        self.open = 0  # connections open now
        self._servers: list[asyncio.Server] = []

    async def start(self, host: str, port: int, ssl: SSLContext | None = None) -> int:
        """Listen on ``host``:``port`` (over TLS with ``ssl``); the port it listens on."""
        server = await asyncio.start_server(
            self._handle, host, port, limit=HEAD_LIMIT, reuse_address=True, ssl=ssl,
            ssl_handshake_timeout=REQUEST_TIMEOUT_S if ssl is not None else None)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def listen(self, host: str, port: int, required: bool, missing: str,
                     hint: str, ssl: SSLContext | None = None) -> int:
        """Start, as a listener of the broker's configuration: one that was configured
        (``required``) raises OSError, whose ``filename`` is the address, when it cannot
        listen; the default one logs that the broker runs with no ``missing``, why, and
        ``hint`` (0). The port it listens on."""
        what = f"{self.what} (TLS)" if ssl is not None else self.what
        try:
            return await self.start(host, port, ssl)
        except OSError as e:
            if required:
                raise listen_error(e, what, host, port) from e
            log.warning("no %s: cannot listen on %s:%d (%s); %s", missing, host, port, reason(e),
                        hint)
            return 0

    @property
    def port(self) -> int:
        """The port of the first socket started."""
        return int(self._servers[0].sockets[0].getsockname()[1])

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= self.max_connections:
            log.warning("%s: connection refused, %d open (the limit)", self.what, self.open)
            writer.write(render(Response(503, b"too many connections\n")))
            writer.close()
            return
        self.open += 1
        try:
            await self._serve(reader, writer)
        finally:
            self.open -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                    ConnectionError):
                return
            request = parse_head(head)
            if request is None:
                await self._refuse(reader, writer, Response(400, b"bad request\n"))
                return
            length = body_length(request, BODY_LIMIT)
            if isinstance(length, Response):
                await self._refuse(reader, writer, length)
                return
            body = (await asyncio.wait_for(reader.readexactly(length), REQUEST_TIMEOUT_S)
                    if length else b"")
            peer = writer.get_extra_info("peername")
            request = replace(request, peer=peer[0] if isinstance(peer, tuple) else None,
                              body=body)
            writer.write(render(self.answer(request), head_only=request.method == "HEAD"))
            await writer.drain()
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        except Exception:  # a request that fails costs that request only
            log.exception("%s request failed", self.what)
        finally:
            writer.close()

    @staticmethod
    async def _refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      response: Response) -> None:
        """Answer ``response`` and end our side, then read and drop what the client still
        sends (a body it writes before reading) until it closes, or LINGER_BYTES or LINGER_S
        pass: closing with its bytes unread would reset the connection under the answer."""
        writer.write(render(response))
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        dropped = 0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LINGER_S):
                while dropped < LINGER_BYTES:
                    got = await reader.read(64 << 10)
                    if not got:
                        break
                    dropped += len(got)
