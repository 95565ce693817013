"""A minimal HTTP/1.x server on the broker's own event loop for one page, ``GET /metrics``:
no thread, so a scrape reads the broker's state between two events, never during one.

One request per connection (answered with ``Connection: close``); a request head longer than
HEAD_LIMIT or slower than REQUEST_TIMEOUT_S closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

log = logging.getLogger("streamlet.broker")

HEAD_LIMIT = 8192
REQUEST_TIMEOUT_S = 10.0
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


class MetricsServer:
    """Serves ``render()`` (bytes, ``content_type``) at ``/metrics`` on ``host``:``port``."""

    def __init__(self, render: Callable[[], bytes], content_type: str) -> None:
        self.render = render
        self.content_type = content_type
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port, limit=HEAD_LIMIT,
                                                  reuse_address=True)

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
            status, body, content_type = self._answer(head)
            method = head.split(b" ", 1)[0]
            writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n" % (status, REASONS[status].encode(),
                                                         content_type.encode(), len(body)))
            if method != b"HEAD":
                writer.write(body)
            await writer.drain()
        except ConnectionError:
            pass
        except Exception:  # a scrape that fails costs that scrape only
            log.exception("metrics request failed")
        finally:
            writer.close()

    def _answer(self, head: bytes) -> tuple[int, bytes, str]:
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return 400, b"bad request\n", "text/plain"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target not in (b"/metrics", b"/"):
            return 404, b"not found: try /metrics\n", "text/plain"
        if method not in (b"GET", b"HEAD"):
            return 405, b"GET or HEAD only\n", "text/plain"
        if target == b"/":
            return 200, b"streamlet: Prometheus metrics at /metrics\n", "text/plain"
        return 200, self.render(), self.content_type
