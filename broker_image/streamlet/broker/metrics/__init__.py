"""The broker's Prometheus endpoint: ``/metrics`` on [listeners.metrics] (default port 15692;
HTTPS beside it on its tls_port, [tls]'s certificate, reloaded as the stream listeners' is, no
client certificate asked for), served by the broker's event loop from what its streams
already count (collector.py), and its readiness at ``/ready`` (http.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from .collector import BrokerCollector
from .http import MetricsServer

if TYPE_CHECKING:
    from ..server import Broker

log = logging.getLogger("streamlet.broker")

__all__ = ["BrokerCollector", "MetricsServer", "registry_for", "start_metrics"]


def registry_for(broker: Broker) -> CollectorRegistry:
    """The broker's metrics and the process's (CPU, memory, descriptors), in a registry of
    their own (not prometheus_client's global one)."""
    cfg = broker.config.metrics
    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker, cfg.max_streams if cfg else 0,
                                      cfg.max_consumers if cfg else 0))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


async def start_metrics(broker: Broker) -> MetricsServer | None:
    """Listen for scrapes as [listeners.metrics] says (None: turned off, or the default port
    was taken). A configured listener that cannot listen raises OSError, whose ``filename``
    is the address."""
    cfg = broker.config.metrics
    if cfg is None:
        log.info("no metrics endpoint (turned off)")
        return None
    host = cfg.host if cfg.host is not None else broker.config.host
    registry = registry_for(broker)
    server = MetricsServer(lambda: generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4,
                           broker.readiness)
    if not await server.listen(host, cfg.port, cfg.required, "metrics endpoint",
                               "set [listeners.metrics] port or serve --metrics-port"):
        return None
    log.info("streamlet metrics at http://%s:%d/metrics", host, server.port)
    if cfg.tls_port is not None:
        assert broker.tls is not None  # the config's validation
        # the management API's context: [tls]'s certificate as reloaded, no client certificate
        try:
            port = await server.listen(host, cfg.tls_port, cfg.required, "metrics over TLS",
                                       "set [listeners.metrics] tls_port",
                                       ssl=broker.tls.web_listening)
            if port:
                log.info("streamlet metrics at https://%s:%d/metrics", host, port)
        except OSError:
            await server.close()  # the plain one, which listened
            raise
    return server
