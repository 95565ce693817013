"""Names and labels of the objects made for a Broker (one place, so nothing disagrees)."""

from __future__ import annotations

CONFIG_KEY = "streamlet.toml"
USERS_KEY = "users.toml"
DIRECTORY_KEY = "streams.json"
OPERATOR_USER = "streamlet-operator"


def headless_service(broker: str) -> str:
    return f"{broker}-headless"


def client_service(broker: str) -> str:
    return broker


def configmap(broker: str) -> str:
    return f"{broker}-config"


def directory_configmap(broker: str) -> str:
    return f"{broker}-directory"


def users_secret(broker: str) -> str:
    return f"{broker}-users"


def operator_secret(broker: str) -> str:
    return f"{broker}-operator"


def pod(broker: str, ordinal: int) -> str:
    return f"{broker}-{ordinal}"


def pod_dns(broker: str, ordinal: int, namespace: str, cluster_domain: str | None = None) -> str:
    host = f"{pod(broker, ordinal)}.{headless_service(broker)}.{namespace}.svc"
    return f"{host}.{cluster_domain}" if cluster_domain else host


def selector(broker: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "streamlet-broker", "app.kubernetes.io/instance": broker}


def labels(broker: str) -> dict[str, str]:
    return {
        **selector(broker),
        "app.kubernetes.io/component": "broker",
        "app.kubernetes.io/part-of": "streamlet",
        "app.kubernetes.io/managed-by": "streamlet-operator",
    }
