"""The operator's builders: every manifest valid for Kubernetes; the config the broker reads."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from streamlet.broker import config as broker_config
from streamlet_operator import names
from streamlet_operator.builders import build_all, render_config, render_users
from streamlet_operator.builders.statefulset import build_statefulset
from streamlet_operator.model import BrokerModel
from tests.chart.conftest import KUBE_VERSIONS


def broker(**spec: Any) -> BrokerModel:
    return BrokerModel.from_body({"metadata": {"name": "events", "namespace": "prod",
                                               "uid": "1234"}, "spec": spec})


SPECS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "tls-and-resources": {"tls": {"secretName": "events-tls"}, "port": 6000,
                          "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                        "limits": {"memory": 2147483648}},
                          "storage": {"size": "50Gi", "storageClassName": "fast"}},
    "pod-ip": {"advertise": {"mode": "PodIP"}, "replicas": 3},
    "template": {"advertise": {"mode": "Template", "hostTemplate": "{pod}.x.example.com",
                               "port": 30552}},
    "overrides": {"podTemplate": {
        "metadata": {"labels": {"team": "data"}, "annotations": {"a": "b"}},
        "spec": {"nodeSelector": {"disk": "ssd"}, "priorityClassName": "high",
                 "tolerations": [{"key": "k", "operator": "Exists"}],
                 "containers": [{"name": "broker", "env": [{"name": "X", "value": "1"}]},
                                {"name": "sidecar", "image": "busybox:1.36"}]}}},
}


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_manifests_are_valid(spec: dict[str, Any], version: str) -> None:
    for manifest in build_all(broker(**spec), 3, {"streamlet-operator": "pw", "app": "x"}):
        kubernetes_validate.validate(manifest, version, strict=True)


def test_children_are_owned_and_selected() -> None:
    manifests = {m["kind"] + "/" + m["metadata"]["name"]: m for m in build_all(broker(), 2, {})}
    assert set(manifests) == {"ConfigMap/events-config", "Secret/events-users",
                              "Service/events-headless", "Service/events", "StatefulSet/events",
                              "PodDisruptionBudget/events"}
    for m in manifests.values():
        assert m["metadata"]["ownerReferences"][0]["uid"] == "1234"
        assert m["metadata"]["namespace"] == "prod"
    sts = manifests["StatefulSet/events"]
    selector = sts["spec"]["selector"]["matchLabels"]
    assert selector.items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert manifests["Service/events"]["spec"]["selector"] == selector
    assert manifests["PodDisruptionBudget/events"]["spec"]["selector"]["matchLabels"] == selector


def test_config_is_what_the_broker_reads(tmp_path: Path) -> None:
    """The ConfigMap's file plus the users Secret's file, joined as the pod joins them, loaded
    by the broker's own config loader."""
    model = broker(port=6000, retention={"maxAge": "2D", "maxLengthBytes": 5000,
                                         "maxSegmentSizeBytes": 1000000})
    path = tmp_path / "streamlet.toml"
    path.write_text(render_config(model) + "\n" + render_users({"streamlet-operator": "p w\"x",
                                                                "app": "secret"}))
    cfg = broker_config.load(path)
    assert cfg.port == 6000 and cfg.host == "0.0.0.0"
    assert str(cfg.data_dir) == "/var/lib/streamlet"
    assert cfg.retention.max_age_ms == 2 * 86400_000
    assert cfg.retention.max_length_bytes == 5000
    assert cfg.retention.max_segment_size_bytes == 1000000
    users = {u.name: u for u in cfg.users}
    assert users["streamlet-operator"].password == 'p w"x'
    assert not users["app"].loopback_only


def test_tls_config_is_what_the_broker_reads(tmp_path: Path) -> None:
    model = broker(tls={"secretName": "events-tls", "port": 5671})
    path = tmp_path / "streamlet.toml"
    path.write_text(render_config(model) + "\n" + render_users({"u": "p"}))
    cfg = broker_config.load(path)
    assert cfg.tls is not None and cfg.tls.port == 5671
    assert str(cfg.tls.certfile) == "/etc/streamlet/tls/tls.crt"
    assert str(cfg.tls.keyfile) == "/etc/streamlet/tls/tls.key"


def test_users_secret_carries_the_users_file() -> None:
    secret = [m for m in build_all(broker(), 1, {"u": "p"}) if m["kind"] == "Secret"][0]
    text = base64.b64decode(secret["data"][names.USERS_KEY]).decode()
    assert 'name = "u"' in text and 'password = "p"' in text


def _env(sts: dict[str, Any]) -> dict[str, Any]:
    container = sts["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_advertised_hosts() -> None:
    env = _env(build_statefulset(broker(), 1))
    assert env["STREAMLET_ADVERTISED_HOST"] == "$(POD_NAME).events-headless.prod.svc.cluster.local"
    env = _env(build_statefulset(broker(advertise={"mode": "PodIP"}), 1))
    assert env["STREAMLET_ADVERTISED_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    env = _env(build_statefulset(broker(**SPECS["template"]), 1))
    assert env["STREAMLET_ADVERTISED_HOST"] == "$(POD_NAME).x.example.com"
    assert env["STREAMLET_ADVERTISED_PORT"] == "30552"


def test_pod_template_overrides_merge() -> None:
    pod = build_statefulset(broker(**SPECS["overrides"]), 1)["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "data"
    assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] == "events"
    assert "streamlet.dev/config-hash" in pod["metadata"]["annotations"]
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"disk": "ssd"} and spec["priorityClassName"] == "high"
    broker_container, sidecar = spec["containers"]
    assert broker_container["image"] == "ghcr.io/streamlet/broker:0.1.0"  # kept
    assert {"name": "X", "value": "1"} in broker_container["env"]
    assert broker_container["readinessProbe"]["tcpSocket"]["port"] == "stream"
    assert sidecar["image"] == "busybox:1.36"


def test_config_change_rolls_pods() -> None:
    a = build_statefulset(broker(), 1)["spec"]["template"]["metadata"]["annotations"]
    b = build_statefulset(broker(retention={"maxAge": "1D"}), 1)
    assert a != b["spec"]["template"]["metadata"]["annotations"]


def test_scale_down_guard_keeps_replicas() -> None:
    assert build_statefulset(broker(replicas=1), 3)["spec"]["replicas"] == 3
