"""The broker StatefulSet: a PVC per pod, readiness from the broker's /ready (replication in
sync), liveness on the stream port, SIGTERM as the drain."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from .. import names
from ..model import BrokerModel
from .common import metadata
from .configmap import (
    DATA_DIR,
    DIRECTORY_FILE,
    METRICS_PORT,
    METRICS_TLS_PORT,
    TLS_CA_DIR,
    TLS_DIR,
    USERS_DIR,
    render_config,
)

CONFIG_DIR = "/etc/streamlet/config"
DIRECTORY_DIR = DIRECTORY_FILE.rsplit("/", 1)[0]
UID = 10001

#: A Broker without spec.resources: requests, so the scheduler counts the pod and it is not
#: BestEffort (the first evicted under pressure); no limits (a CPU limit throttles the event
#: loop; the broker's memory follows its connections and readers). spec.resources wins whole.
DEFAULT_RESOURCES: dict[str, Any] = {"requests": {"cpu": "500m", "memory": "512Mi"}}

# The config names the users file (the Secret) and the stream directory (a ConfigMap).
COMMAND = ["streamlet", "serve", "--config", f"{CONFIG_DIR}/{names.CONFIG_KEY}"]
# No drain command: a stream lives on one pod only, so there is nowhere for its clients to go
# while the pod is down. SIGTERM is the drain (the broker stops listening, flushes what it
# accepted, closes its logs and connections; clients reconnect when it is back). The preStop
# sleep only gives the endpoints controller time to take the pod out of the client Service, so
# new connections go to other pods instead of a closed port.
PRE_STOP = ["sleep", "5"]


def _advertised_host_env(broker: BrokerModel) -> dict[str, Any]:
    adv = broker.advertise
    if adv.mode == "PodIP":
        return {"name": "STREAMLET_ADVERTISED_HOST",
                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    if adv.mode == "Template" and adv.host_template:
        host = (adv.host_template.replace("{pod}", "$(POD_NAME)")
                .replace("{ordinal}", "$(POD_ORDINAL)")
                .replace("{broker}", broker.name)
                .replace("{namespace}", broker.namespace))
        return {"name": "STREAMLET_ADVERTISED_HOST", "value": host}
    dns = f"$(POD_NAME).{names.headless_service(broker.name)}.{broker.namespace}.svc"
    return {"name": "STREAMLET_ADVERTISED_HOST", "value": f"{dns}.{adv.cluster_domain}"}


def _command(broker: BrokerModel) -> list[str]:
    """The broker's command: spec.logging as flags, only when set (so a Broker without it
    keeps its pod template, and its pods, as they were)."""
    command = list(COMMAND)
    if broker.log_level:
        command += ["--log-level", broker.log_level.upper()]
    if broker.log_json:
        command += ["--log-format", "json"]
    return command


#: the broker's readiness endpoint on its metrics port (broker/metrics/http.py)
READY_PATH = "/ready"


def _container(broker: BrokerModel) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_ORDINAL", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}},
        _advertised_host_env(broker),
    ]
    if broker.advertise.port:
        env.append({"name": "STREAMLET_ADVERTISED_PORT", "value": str(broker.advertise.port)})
    ports = [{"name": "stream", "containerPort": broker.port, "protocol": "TCP"}
             ] if broker.plain_listener else []
    ports.append({"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"})
    if broker.metrics_tls:
        ports.append({"name": "metrics-tls", "containerPort": METRICS_TLS_PORT,
                      "protocol": "TCP"})
    mounts = [
        {"name": "data", "mountPath": DATA_DIR},
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "users", "mountPath": USERS_DIR, "readOnly": True},
        # A whole-directory mount (no subPath): the kubelet updates it when the ConfigMap changes.
        {"name": "directory", "mountPath": DIRECTORY_DIR, "readOnly": True},
    ]
    if broker.tls is not None:
        ports.append({"name": "stream-tls", "containerPort": broker.tls_port, "protocol": "TCP"})
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        if broker.tls.ca_secret:
            mounts.append({"name": "tls-ca", "mountPath": TLS_CA_DIR, "readOnly": True})
    # TLS only: the liveness probe connects to the TLS port (a TCP connect; no handshake
    # needed). Readiness is the broker's own /ready on the metrics port (plain HTTP, no auth):
    # serving, and every replicated stream it follows in sync (docs/operations.md#readiness)
    probe_port = "stream" if broker.plain_listener else "stream-tls"
    container: dict[str, Any] = {
        "name": "broker",
        "image": broker.image,
        "imagePullPolicy": broker.image_pull_policy,
        "command": _command(broker),
        "env": env,
        "ports": ports,
        "volumeMounts": mounts,
        "readinessProbe": {"httpGet": {"path": READY_PATH, "port": "metrics"},
                           "periodSeconds": 5, "failureThreshold": 2},
        "livenessProbe": {"tcpSocket": {"port": probe_port}, "initialDelaySeconds": 15,
                          "periodSeconds": 10, "failureThreshold": 6},
        "lifecycle": {"preStop": {"exec": {"command": list(PRE_STOP)}}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    container["resources"] = copy.deepcopy(broker.resources or DEFAULT_RESOURCES)
    return container


def _volumes(broker: BrokerModel) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": names.configmap(broker.name)}},
        {"name": "users", "secret": {"secretName": names.users_secret(broker.name)}},
        # optional: a pod may start before the operator first writes it (the broker then knows
        # only its own streams until the file appears).
        {"name": "directory", "configMap": {"name": names.directory_configmap(broker.name),
                                            "optional": True}},
    ]
    if broker.tls is not None:
        # Whole-directory Secret mounts: the kubelet swaps in a renewed certificate, and the
        # broker reloads its certificate files when they change (no restart).
        volumes.append({"name": "tls", "secret": {"secretName": broker.tls.secret}})
        if broker.tls.ca_secret:
            volumes.append({"name": "tls-ca", "secret": {"secretName": broker.tls.ca_secret,
                                                          "items": [{"key": "ca.crt",
                                                                     "path": "ca.crt"}]}})
    return volumes


def _merge(base: Any, override: Any) -> Any:
    """Deep-merge pod template overrides: dicts merge, containers merge by name, lists replace."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                out[key] = _merge_named(base.get(key, []), value)
            else:
                out[key] = _merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def _merge_named(base: list[dict[str, Any]], override: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(item) for item in base]
    for item in override:
        match = next((i for i, b in enumerate(out) if b.get("name") == item.get("name")), None)
        if match is None:
            out.append(copy.deepcopy(item))
        else:
            out[match] = _merge(out[match], item)
    return out


def config_hash(broker: BrokerModel) -> str:
    """What rolls the pods: the rendered config (the broker reads it once, at start), which
    holds the vhosts too, so a vhost change rolls the pods, one at a time (rolling.py).

    Not the users, their permissions nor the certificates: the broker reloads its users file
    (users and permissions, in one swap: builders/secret.py) and its certificate files when
    their content changes (it polls them; SIGHUP too), and the kubelet updates the Secret
    volumes in place, so a password, a permission (an export user's too) or a renewed
    certificate rolls nothing. Only Secret names are in the template (the volumes), never
    their content.

    Not the pod count (cluster.peers, rendered here for one pod): a restarted broker comes
    back fenced in every replicated stream it is a member of, and until the operator drives
    elections nothing assigns it again, so a scale must not restart the pods. A pod keeps the
    peers it started with until it restarts for another reason."""
    return hashlib.sha256(render_config(broker, 1).encode()).hexdigest()[:16]


#: The pod template's hash, on the template and so on every pod made from it: a pod whose
#: value differs from the StatefulSet's is outdated, and the operator rolls it (rolling.py).
TEMPLATE_HASH = "streamlet.dev/template-hash"


def template_hash(template: dict[str, Any]) -> str:
    """A hash of the pod template (its own annotation left out)."""
    doc = copy.deepcopy(template)
    (doc.get("metadata") or {}).get("annotations", {}).pop(TEMPLATE_HASH, None)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _spread(broker: BrokerModel) -> dict[str, Any]:
    """Members of a replicated stream sit on distinct pods; these keep the pods on distinct
    nodes (and zones) when the scheduler can, and schedule them anyway when it cannot (kind
    with one node, a zone down): preferred, never required."""
    selector = {"matchLabels": names.selector(broker.name)}
    return {
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": selector,
                                                "topologyKey": "kubernetes.io/hostname"}}]}},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
             "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}],
    }


def build_statefulset(broker: BrokerModel, replicas: int) -> dict[str, Any]:
    """``replicas`` may exceed spec.replicas while pods to be removed still hold streams."""
    pod_meta: dict[str, Any] = {
        "labels": names.labels(broker.name),
        # A new config rolls the pods: the broker reads it once, at start. (Not the users,
        # the certificates, the stream directory nor the pod count: config_hash says why.)
        "annotations": {"streamlet.dev/config-hash": config_hash(broker)},
    }
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID, "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(broker)],
        "volumes": _volumes(broker),
        **_spread(broker),
    }
    override = broker.pod_template
    if override.get("metadata"):
        pod_meta = _merge(pod_meta, override["metadata"])
    if override.get("spec"):
        pod_spec = _merge(pod_spec, override["spec"])
    pvc_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": broker.storage_size}},
    }
    if broker.storage_class:
        pvc_spec["storageClassName"] = broker.storage_class
    template = {"metadata": pod_meta, "spec": pod_spec}
    pod_meta.setdefault("annotations", {})[TEMPLATE_HASH] = template_hash(template)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(broker, broker.name),
        "spec": {
            "replicas": replicas,
            "serviceName": names.headless_service(broker.name),
            # Pods hold independent streams: start and stop them in parallel.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": names.selector(broker.name)},
            # The operator rolls the pods itself, one at a time: leadership moved off a pod
            # before it goes, the next only once every stream is in sync (rolling.py). The
            # StatefulSet controller only makes the pod again, from the new template.
            # (rollingUpdate: null clears the RollingUpdate strategy's settings.)
            "updateStrategy": {"type": "OnDelete", "rollingUpdate": None},
            # A scale-down never drops data on its own: the operator refuses it while pods hold
            # streams, and the volumes stay for a scale back up.
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "template": template,
            "volumeClaimTemplates": [{
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "labels": names.selector(broker.name)},
                "spec": pvc_spec,
            }],
        },
    }


#: The pod template's annotation with the restart value last handled (the Broker's
#: streamlet.dev/restart, day2.py): a new value is a new template, so the operator rolls the pods.
RESTARTED_AT = "streamlet.dev/restartedAt"


def with_restart(sts: dict[str, Any], value: str | None) -> dict[str, Any]:
    """``sts`` with ``value`` on its pod template and the template's hash made again (None:
    ``sts`` as it is)."""
    if not value:
        return sts
    result = copy.deepcopy(sts)
    template = result["spec"]["template"]
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[RESTARTED_AT] = value
    annotations[TEMPLATE_HASH] = template_hash(template)
    return result


# Fields of a StatefulSet's spec the API server refuses to change after creation.
IMMUTABLE_SPEC_FIELDS = ("selector", "serviceName", "podManagementPolicy", "volumeClaimTemplates")
