"""The management HTTP API: RabbitMQ's management endpoints that stream users touch (overview,
connections list and close, streams as queues, stream publishers and consumers, vhosts,
whoami) on [listeners.http] (default port 15672), served by the broker's event loop."""

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
    if not await server.listen(host, cfg.port, cfg.required, "management API",
                               "set [listeners.http] port or serve --http-port"):
        return None
    api.port = broker.http_port = server.port
    log.info("streamlet management API at http://%s:%d/api/", host, server.port)
    return server
