"""A Broker's NetworkPolicy: who may reach its pods, port by port (spec.networkPolicy).

The stream ports (plain and TLS) from anywhere or from spec.networkPolicy.clientNamespaces;
always from the Broker's own pods (replication runs over these ports), the operator's pods and
the Broker's export jobs. Metrics (HTTP, and HTTPS beside it with TLS) from metricsNamespaces
(default: every namespace), the management API (HTTP, HTTPS or both) from managementNamespaces
(default: the Broker's own namespace). Nothing else reaches the pods; egress is not
restricted. None when spec.networkPolicy.enabled is false.
"""

from __future__ import annotations

from typing import Any

from .. import names
from ..model import BrokerModel
from .common import metadata
from .configmap import MANAGEMENT_PORT, MANAGEMENT_TLS_PORT, METRICS_PORT, METRICS_TLS_PORT

#: the labels of the operator's pods (the chart's Deployment) and of export jobs' pods
OPERATOR_POD = {"app.kubernetes.io/name": "streamlet-operator"}
EXPORT_POD = {"app.kubernetes.io/name": "streamlet-export"}
NAMESPACE_NAME = "kubernetes.io/metadata.name"


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def stream_ports(broker: BrokerModel) -> list[int]:
    """The ports clients, the operator and the other pods (replication) connect to."""
    return ([broker.port] if broker.plain_listener else []) + (
        [broker.tls_port] if broker.tls is not None else [])


def management_ports(broker: BrokerModel) -> list[int]:
    """The management API's: plain HTTP, HTTPS, or both (BrokerModel.management_*)."""
    return ([MANAGEMENT_PORT] if broker.management_plain else []) + (
        [MANAGEMENT_TLS_PORT] if broker.management_tls else [])


def metrics_ports(broker: BrokerModel) -> list[int]:
    """The metrics endpoint's: plain HTTP, and HTTPS beside it (BrokerModel.metrics_tls)."""
    return [METRICS_PORT] + ([METRICS_TLS_PORT] if broker.metrics_tls else [])


def build_networkpolicy(broker: BrokerModel, operator_namespace: str | None = None
                        ) -> dict[str, Any] | None:
    """The policy, or None when turned off. ``operator_namespace``: where the operator's pods
    run (None: any namespace, pods selected by their labels only)."""
    spec = broker.network_policy
    if not spec.enabled:
        return None
    ports = _tcp(*stream_ports(broker))
    operator_ns = ({"matchLabels": {NAMESPACE_NAME: operator_namespace}}
                   if operator_namespace else {})
    own: list[dict[str, Any]] = [
        {"podSelector": {"matchLabels": names.selector(broker.name)}},
        {"podSelector": {"matchLabels": dict(EXPORT_POD)}},
        {"namespaceSelector": operator_ns, "podSelector": {"matchLabels": dict(OPERATOR_POD)}},
    ]
    clients: dict[str, Any] = {"ports": ports}
    if spec.client_namespaces is not None:
        clients["from"] = [{"namespaceSelector": spec.client_namespaces}]
    metrics_from = {"namespaceSelector": ({} if spec.metrics_namespaces is None
                                          else spec.metrics_namespaces)}
    management_from = ({"podSelector": {}} if spec.management_namespaces is None
                       else {"namespaceSelector": spec.management_namespaces})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(broker, broker.name),
        "spec": {
            "podSelector": {"matchLabels": names.selector(broker.name)},
            "policyTypes": ["Ingress"],
            "ingress": [
                clients,
                {"ports": list(ports), "from": own},
                {"ports": _tcp(*metrics_ports(broker)), "from": [metrics_from]},
                {"ports": _tcp(*management_ports(broker)), "from": [management_from]},
            ],
        },
    }
