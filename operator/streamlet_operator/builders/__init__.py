"""Builders: pure functions from a Broker to the manifests that run it (no I/O, no cluster)."""

from typing import Any

from ..model import BrokerModel
from .configmap import build_configmap, render_config
from .networkpolicy import build_networkpolicy
from .pdb import build_pdb
from .secret import build_users_secret, render_users
from .services import build_client_service, build_headless_service
from .statefulset import build_statefulset


def build_all(broker: BrokerModel, replicas: int, users: dict[str, str],
              operator_namespace: str | None = None) -> list[dict[str, Any]]:
    """Every child of a Broker, in the order they should be applied. ``operator_namespace``:
    where the operator's pods run (its NetworkPolicy lets them in)."""
    policy = build_networkpolicy(broker, operator_namespace)
    return [
        build_configmap(broker, replicas),  # cluster.peers: every pod the StatefulSet runs
        build_users_secret(broker, users),
        build_headless_service(broker),
        build_client_service(broker),
        build_statefulset(broker, replicas),
        build_pdb(broker),
        *([policy] if policy is not None else []),
    ]


__all__ = [
    "build_all",
    "build_client_service",
    "build_configmap",
    "build_headless_service",
    "build_networkpolicy",
    "build_pdb",
    "build_statefulset",
    "build_users_secret",
    "render_config",
    "render_users",
]
