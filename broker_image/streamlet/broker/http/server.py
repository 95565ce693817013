"""A minimal HTTP/1.x server on the broker's own event loop: no thread, so an answer reads the
broker's state between two events, never during one.

One request per connection (answered with ``Connection: close``); a request head longer than
HEAD_LIMIT or slower than REQUEST_TIMEOUT_S closes the connection unanswered. A body (only
the management API's queue declaration takes one) is read, up to BODY_LIMIT, and handed to the
page with the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace

from ..listening import listen_error, reason
from .messages import Request, Response, parse_head, render

log = logging.getLogger("streamlet.broker")

HEAD_LIMIT = 8192
BODY_LIMIT = 64 << 10
REQUEST_TIMEOUT_S = 10.0

Answer = Callable[[Request], Response]


class HttpServer:
    """Serves ``answer(request)`` on ``host``:``port``; ``what`` names it in the log."""

    def __init__(self, answer: Answer, what: str) -> None:
        self.answer = answer
        self.what = what
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port, limit=HEAD_LIMIT,
                                                  reuse_address=True)

    async def listen(self, host: str, port: int, required: bool, missing: str,
                     hint: str) -> bool:
        """Start, as a listener of the broker's configuration: one that was configured
        (``required``) raises OSError, whose ``filename`` is the address, when it cannot
        listen; the default one logs that the broker runs with no ``missing``, why, and
        ``hint`` (False)."""
        try:
            await self.start(host, port)
        except OSError as e:
            if required:
                raise listen_error(e, self.what, host, port) from e
            log.warning("no %s: cannot listen on %s:%d (%s); %s", missing, host, port, reason(e),
                        hint)
            return False
        return True

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                    ConnectionError):
                return
            request = parse_head(head)
            if request is None:
                writer.write(render(Response(400, b"bad request\n")))
            else:
                body = await self._read_body(reader, request)
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
    async def _read_body(reader: asyncio.StreamReader, request: Request) -> bytes:
        length = request.headers.get("content-length", "0")
        size = int(length) if length.isdigit() else 0
        if not size:
            return b""
        return await asyncio.wait_for(reader.readexactly(min(size, BODY_LIMIT)),
                                      REQUEST_TIMEOUT_S)
