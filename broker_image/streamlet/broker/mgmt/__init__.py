"""The management HTTP API: RabbitMQ's management endpoints that stream users touch (overview,
connections list and close, streams as queues, stream publishers and consumers, vhosts,
whoami) on [listeners.http] (default port 15672; HTTPS on its tls_port, [tls]'s certificate,
reloaded as the stream listeners' is), served by the broker's event loop."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..http import HttpServer
from .api import ManagementApi

if TYPE_CHECKING:
    from ..server import Broker

log = logging.getLogger("streamlet.broker")

__all__ = ["ManagementApi", "start_management"]


async def start_management(broker: Broker) -> HttpServer | None:
    """Listen as [listeners.http] says (None: turned off, or the default port was taken). A
    configured listener that cannot listen raises OSError, whose ``filename`` is the address."""
    cfg = broker.config.http
    if cfg is None:
        log.info("no management API (turned off)")
        return None
    host = cfg.host if cfg.host is not None else broker.config.host
    api = ManagementApi(broker)
    server = HttpServer(api.answer, "management API")
    try:
        await _listen(broker, server, host)
    except OSError:
        await server.close()  # the one that listened
        raise
    if not (broker.http_port or broker.https_port):
        return None
    api.port = broker.http_port or broker.https_port or 0
    return server


async def _listen(broker: Broker, server: HttpServer, host: str) -> None:
    """HTTPS on tls_port, then HTTP on port, as configured: their ports set on ``broker``."""
    cfg = broker.config.http
    assert cfg is not None
    if cfg.tls_port is not None:
        assert broker.tls is not None  # the config's validation
        # the stream listeners' context: a reloaded certificate serves the next handshakes
        broker.https_port = await server.listen(host, cfg.tls_port, cfg.required,
                                                "management API over TLS", "set [listeners.http] "
                                                "tls_port", ssl=broker.tls.web_listening) or None
        if broker.https_port:
            log.info("streamlet management API at https://%s:%d/api/", host, broker.https_port)
    if cfg.port is not None:
        broker.http_port = await server.listen(host, cfg.port, cfg.required, "management API",
                                               "set [listeners.http] port or serve --http-port"
                                               ) or None
        if broker.http_port:
            log.info("streamlet management API at http://%s:%d/api/", host, broker.http_port)
