"""The headless Service (stable pod DNS names, advertised to clients) and the client Service."""

from __future__ import annotations

from typing import Any

from .. import names
from ..model import BrokerModel
from .common import metadata
from .configmap import MANAGEMENT_TLS_PORT, METRICS_PORT, METRICS_TLS_PORT


def _ports(broker: BrokerModel) -> list[dict[str, Any]]:
    # TLS only: no plaintext port anywhere, so no client is sent to one
    ports = [{"name": "stream", "port": broker.port, "targetPort": "stream", "protocol": "TCP"}
             ] if broker.plain_listener else []
    if broker.tls is not None:
        ports.append({"name": "stream-tls", "port": broker.tls_port, "targetPort": "stream-tls",
                      "protocol": "TCP"})
    return ports


def build_headless_service(broker: BrokerModel) -> dict[str, Any]:
    # The metrics port on the headless Service only: a ServiceMonitor scrapes each pod through
    # its endpoints; through the client Service a scrape would reach any one pod.
    metrics = [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics",
                "protocol": "TCP"}]
    if broker.metrics_tls:  # the same over HTTPS (spec.tls.metrics)
        metrics.append({"name": "metrics-tls", "port": METRICS_TLS_PORT,
                        "targetPort": "metrics-tls", "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(broker, names.headless_service(broker.name)),
        "spec": {
            "clusterIP": "None",
            # Pods get DNS names before they are ready: clients told a pod's name by Metadata
            # reach it as soon as it starts listening.
            "publishNotReadyAddresses": True,
            "selector": names.selector(broker.name),
            "ports": [*_ports(broker), *metrics],
        },
    }


def build_client_service(broker: BrokerModel) -> dict[str, Any]:
    # The management API over HTTPS, as RabbitMQ's 15671: any pod answers for the cluster's
    # streams and connections to it (plain HTTP stays off the Services)
    management = [{"name": "management-tls", "port": MANAGEMENT_TLS_PORT,
                   "targetPort": MANAGEMENT_TLS_PORT, "protocol": "TCP"}
                  ] if broker.management_tls else []
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(broker, names.client_service(broker.name)),
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector(broker.name),
            "ports": [*_ports(broker), *management],
        },
    }
