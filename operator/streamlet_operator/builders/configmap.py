"""The broker's configuration file, carried by a ConfigMap and read by `streamlet serve --config`."""

from __future__ import annotations

from typing import Any

from .. import names
from ..model import BrokerModel
from .common import metadata, toml_string

DATA_DIR = "/var/lib/streamlet"
TLS_DIR = "/etc/streamlet/tls"
#: spec.tls.caSecretName's ca.crt (without it, the CA is TLS_DIR's ca.crt)
TLS_CA_DIR = "/etc/streamlet/tls-ca"
CA_KEY = "ca.crt"
USERS_DIR = "/etc/streamlet/users"
#: the management API's ports on the pods: plain HTTP (the broker's default) and HTTPS, as
#: RabbitMQ's management listeners
MANAGEMENT_PORT = 15672
MANAGEMENT_TLS_PORT = 15671
#: the broker's Prometheus endpoint and readiness URL (/ready), on the pod's address (the
#: config's [server] host), scraped by the chart's PodMonitor or ServiceMonitor. Configured, so
#: it is required: a pod that cannot serve it stops, rather than running never Ready.
METRICS_PORT = 15692
#: the same endpoint over HTTPS with the Broker's certificate (spec.tls.metrics), as
#: RabbitMQ's Prometheus TLS port
METRICS_TLS_PORT = 15691
# Where the stream directory ConfigMap is mounted (builders/directory.py).
DIRECTORY_FILE = f"/etc/streamlet/directory/{names.DIRECTORY_KEY}"


def peers(broker: BrokerModel, pods: int) -> list[str]:
    """Every pod's address by ordinal, as the brokers reach each other: the pod's DNS name
    through the headless Service and the stream port, or the TLS port whenever the Broker has
    TLS (they replicate over TLS: the pods' certificate names every pod's DNS name)."""
    return [f"{names.pod_dns(broker.name, i, broker.namespace, broker.advertise.cluster_domain)}"
            f":{broker.peer_port}" for i in range(pods)]


def vhosts(broker: BrokerModel) -> tuple[str, ...]:
    """The broker's vhosts: "/" (which it always has), then spec.vhosts, once each. They stay
    in the config (read at start: a vhost change rolls the pods); the permissions on them are
    in the users Secret (builders/secret.py), which the broker reloads."""
    return tuple(dict.fromkeys(("/", *broker.vhosts)))


def render_config(broker: BrokerModel, pods: int | None = None) -> str:
    """The broker's TOML for a StatefulSet of ``pods`` pods (default ``spec.replicas``). Users
    and their permissions come from a Secret, mounted as the file ``users_file`` names (the
    broker reloads it: builders/secret.py); the vhosts are here.

    The advertised host is per pod, so it is not here: each pod sets STREAMLET_ADVERTISED_HOST.
    So is the member id: ``member = "auto"`` is the ordinal the pod's hostname ends in. Every
    pod is a peer, so a Create with ``initial-cluster-size`` > 1 places its members among them
    (brokers read it at start: a pod running before a scale keeps the peers of then, as the
    pod count does not roll the pods, statefulset.config_hash). ``resume_roles``: a restarted
    pod takes up its replicated streams' roles again in their epoch, so streams come back
    even while the operator is down; when the operator elected meanwhile, it assigns the
    returning pod its role in the new epoch (driver.py).
    """
    r = broker.retention
    pods = broker.replicas if pods is None else pods
    lines = [
        "[server]",
        'host = "0.0.0.0"',
        f"port = {broker.port}",
        f"advertised_port = {broker.advertise.port or broker.port}",
        f"data_dir = {toml_string(DATA_DIR)}",
        f"cluster_name = {toml_string(broker.name)}",
        f"users_file = {toml_string(USERS_DIR + '/' + names.USERS_KEY)}",
        "",
        "[cluster]",
        f"directory_file = {toml_string(DIRECTORY_FILE)}",
        'member = "auto"',
        "peers = [" + ", ".join(toml_string(p) for p in peers(broker, pods)) + "]",
        # a restarted pod takes up its roles (the operator re-assigns them after an election)
        "resume_roles = true",
        *([f"tls = {'true' if broker.replication_tls else 'false'}"]  # TLS: links over TLS
          if broker.tls is not None else []),
        "",
        "[storage]",
        f"fsync = {toml_string(broker.fsync)}",  # spec.storage.fsync: what a confirm survives
        "",
        "[retention]",
        f"max_age = {toml_string(r.max_age or '0s')}",
        f"max_length_bytes = {r.max_length_bytes or 0}",
        f"max_segment_size_bytes = {r.max_segment_size_bytes or 500_000_000}",
        "",
        "[listeners.metrics]",
        f"port = {METRICS_PORT}",
        *([f"tls_port = {METRICS_TLS_PORT}"] if broker.metrics_tls else []),
        "",
    ]
    for vhost in vhosts(broker):
        lines += ["[[vhosts]]", f"name = {toml_string(vhost)}", ""]
    tls = broker.tls
    if tls is not None:
        lines += [
            "[tls]",
            f"port = {tls.port}",
            # The keys of a kubernetes.io/tls Secret, mounted at TLS_DIR.
            f"certfile = {toml_string(TLS_DIR + '/tls.crt')}",
            f"keyfile = {toml_string(TLS_DIR + '/tls.key')}",
        ]
        if tls.cafile_wanted:
            ca_dir = TLS_CA_DIR if tls.ca_secret else TLS_DIR
            lines.append(f"cafile = {toml_string(ca_dir + '/' + CA_KEY)}")
        lines.append(f"verify_peer = {'true' if tls.verify_peer else 'false'}")
        if not tls.plain_listener and broker.advertise.port:  # advertise.port is the clients'
            lines.append(f"advertised_port = {broker.advertise.port}")
        lines.append("")
        if not tls.plain_listener:
            lines += ["[listeners.rabbitmq]", "enabled = false", ""]
    if broker.management_tls:  # HTTPS with [tls]'s certificate; plain HTTP beside it or not
        lines += ["[listeners.http]", f"tls_port = {MANAGEMENT_TLS_PORT}",
                  *([f"port = {MANAGEMENT_PORT}"] if broker.management_plain else []), ""]
    return "\n".join(lines)


def build_configmap(broker: BrokerModel, pods: int | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(broker, names.configmap(broker.name)),
        "data": {names.CONFIG_KEY: render_config(broker, pods)},
    }
