"""The operator's builders: every manifest valid for Kubernetes; the config the broker reads."""

from __future__ import annotations

import base64
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from streamlet.broker.config import environment, model
from streamlet.broker.config.model import FSYNC_POLICIES
from streamlet.broker.directory import parse as parse_directory
from streamlet.broker.protocols import load
from streamlet.replication.requests import named_peer
from streamlet_operator import names
from streamlet_operator.brokers import ClientTls
from streamlet_operator.builders import build_all, render_config, render_users
from streamlet_operator.builders.directory import (
    Placed,
    advertised_host,
    build_directory_configmap,
    render_directory,
)
from streamlet_operator.builders.secret import broker_users, plan_access, unknown_users
from streamlet_operator.builders.statefulset import (
    PRE_STOP,
    TEMPLATE_HASH,
    build_statefulset,
    template_hash,
)
from streamlet_operator.model import FSYNC_MODES, BrokerModel
from streamlet_operator.runtime import operator_port
from tests.chart.conftest import KUBE_VERSIONS


def broker(**spec: Any) -> BrokerModel:
    return BrokerModel.from_body({"metadata": {"name": "events", "namespace": "prod",
                                               "uid": "1234"}, "spec": spec})


SPECS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "mtls-only-and-permissions": {
        "tls": {"secretName": "events-tls", "caSecretName": "ca", "verifyPeer": True,
                "plainListener": False, "operatorClientSecret": "events-operator-tls"},
        "vhosts": ["team-a"], "permissions": [{"user": "app", "vhost": "team-a", "write": ""}]},
    "tls-and-resources": {"tls": {"secretName": "events-tls"}, "port": 6000,
                          "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                        "limits": {"memory": 2147483648}},
                          "storage": {"size": "50Gi", "storageClassName": "fast"}},
    "pod-ip": {"advertise": {"mode": "PodIP"}, "replicas": 3,
               "networkPolicy": {"clientNamespaces": {"matchLabels": {"team": "a"}},
                                 "metricsNamespaces": {"matchExpressions": [
                                     {"key": "kubernetes.io/metadata.name", "operator": "In",
                                      "values": ["monitoring"]}]},
                                 "managementNamespaces": {}}},
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
    model = broker(**spec)
    directory = build_directory_configmap(model, render_directory([], lambda o: None))
    for manifest in [*build_all(model, 3, {"streamlet-operator": "pw", "app": "x"},
                                         "streamlet-system"), directory]:
        kubernetes_validate.validate(manifest, version, strict=True)


def test_children_are_owned_and_selected() -> None:
    manifests = {m["kind"] + "/" + m["metadata"]["name"]: m for m in build_all(broker(), 2, {})}
    assert set(manifests) == {"ConfigMap/events-config", "Secret/events-users",
                              "Service/events-headless", "Service/events", "StatefulSet/events",
                              "PodDisruptionBudget/events", "NetworkPolicy/events"}
    for m in manifests.values():
        assert m["metadata"]["ownerReferences"][0]["uid"] == "1234"
        assert m["metadata"]["namespace"] == "prod"
    sts = manifests["StatefulSet/events"]
    selector = sts["spec"]["selector"]["matchLabels"]
    assert selector.items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert manifests["Service/events"]["spec"]["selector"] == selector
    assert manifests["PodDisruptionBudget/events"]["spec"]["selector"]["matchLabels"] == selector
    assert manifests["NetworkPolicy/events"]["spec"]["podSelector"]["matchLabels"] == selector


@pytest.fixture(autouse=True)
def _pod_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker reads the config as pod events-1 of the StatefulSet would (member "auto")."""
    monkeypatch.delenv("STREAMLET_MEMBER", raising=False)
    monkeypatch.setattr(environment.socket, "gethostname", lambda: "events-1")


def _mounted(tmp_path: Path, model: BrokerModel, users: dict[str, str], pods: int = 2) -> Path:
    """The pod's files under tmp_path: the ConfigMap's config naming the Secret's users file
    at the paths the StatefulSet mounts them (checked here too)."""
    container = build_statefulset(model, 1)["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    config_path = container["command"][-1]
    assert container["command"][:3] == ["streamlet", "serve", "--config"]
    assert config_path == f"{mounts['config']}/{names.CONFIG_KEY}"
    text = render_config(model, pods)
    users_path = f"{mounts['users']}/{names.USERS_KEY}"
    assert f'users_file = "{users_path}"' in text
    assert f'directory_file = "{mounts["directory"]}/{names.DIRECTORY_KEY}"' in text
    (tmp_path / "users.toml").write_text(render_users(users))
    path = tmp_path / "streamlet.toml"
    path.write_text(text.replace(users_path, str(tmp_path / "users.toml")))
    return path


def test_config_is_what_the_broker_reads(tmp_path: Path) -> None:
    """The ConfigMap's file and the users Secret's file, loaded by the broker's own loader."""
    model = broker(port=6000, retention={"maxAge": "2D", "maxLengthBytes": 5000,
                                         "maxSegmentSizeBytes": 1000000})
    cfg = load(_mounted(tmp_path, model, {"streamlet-operator": "p w\"x",
                                                        "app": "secret"}))
    assert cfg.port == 6000 and cfg.host == "0.0.0.0"
    assert str(cfg.data_dir) == "/var/lib/streamlet"
    assert cfg.retention.max_age_ms == 2 * 86400_000
    # the readiness URL's listener is configured, so a pod that cannot serve it stops
    assert cfg.metrics is not None and cfg.metrics.port == 15692 and cfg.metrics.required
    assert cfg.retention.max_length_bytes == 5000
    assert cfg.retention.max_segment_size_bytes == 1000000
    users = {u.name: u for u in cfg.users}
    assert users["streamlet-operator"].password == 'p w"x'
    assert not users["app"].loopback_only


def test_every_pod_is_a_peer_and_its_member_id_is_its_ordinal(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """cluster.peers: each pod's DNS name through the headless Service and the TLS port (the
    stream port without TLS), by ordinal; each pod's member id is the ordinal its hostname
    ends in."""
    model = broker(port=6000, replicas=3, tls={"secretName": "events-tls", "port": 5671})
    path = _mounted(tmp_path, model, {"u": "p"}, pods=3)
    cfg = load(path)
    assert cfg.member == 1
    assert cfg.peers == tuple((f"events-{i}.events-headless.prod.svc.cluster.local", 5671)
                              for i in range(3))
    (tmp_path / "plain").mkdir()
    assert load(_mounted(tmp_path / "plain", broker(port=6000, replicas=3), {"u": "p"},
                         pods=3)).peers[2] == ("events-2.events-headless.prod.svc.cluster.local",
                                               6000)
    assert cfg.resume_roles, "restarted pods resume their roles (the operator re-assigns after an election)"
    monkeypatch.setattr(environment.socket, "gethostname", lambda: "events-2")
    assert load(path).member == 2
    # A scale-down kept waiting for moves: the StatefulSet runs 4 pods, and so does the config.
    assert load(_mounted(tmp_path, model, {"u": "p"}, pods=4)).peers[3] == (
        "events-3.events-headless.prod.svc.cluster.local", 5671)
    domain = broker(advertise={"clusterDomain": "k8s.example"})
    assert 'peers = ["events-0.events-headless.prod.svc.k8s.example:5552"]' in render_config(
        domain, 1)


@pytest.mark.parametrize("fsync", FSYNC_MODES)
def test_spec_storage_fsync_is_the_brokers_storage_fsync(tmp_path: Path, fsync: str) -> None:
    """spec.storage.fsync reaches the broker's storage.fsync (what a confirm survives:
    docs/replication.md#what-a-confirm-means); the modes are the broker's own; unset: never."""
    assert FSYNC_MODES == FSYNC_POLICIES
    assert load(_mounted(tmp_path, broker(storage={"fsync": fsync}), {"u": "p"})).fsync == fsync
    assert load(_mounted(tmp_path, broker(), {"u": "p"})).fsync == "never"


def test_a_change_of_fsync_rolls_the_pods() -> None:
    """The broker reads storage.fsync at start: a change is a change of configuration."""
    def hash_of(**storage: Any) -> str:
        sts = build_statefulset(broker(storage=storage), 1)
        return str(sts["spec"]["template"]["metadata"]["annotations"]["streamlet.dev/config-hash"])
    assert hash_of() == hash_of(fsync="never") != hash_of(fsync="chunk")


@pytest.mark.parametrize(("spec", "pods"), [({}, 1), ({"replicas": 3}, 3)])
def test_the_config_lists_spec_replicas_peers_by_default(spec: dict[str, Any], pods: int) -> None:
    text = render_config(broker(**spec))
    assert text.count("events-headless") == pods and 'member = "auto"' in text


def test_a_change_of_the_pod_count_does_not_roll_the_pods() -> None:
    """A restarted broker comes back fenced in its replicated streams, and nothing assigns it
    again yet: a scale must not restart the pods (a change of configuration still does)."""
    def hash_of(replicas: int, **spec: Any) -> str:
        sts = build_statefulset(broker(replicas=replicas, **spec), replicas)
        return str(sts["spec"]["template"]["metadata"]["annotations"]["streamlet.dev/config-hash"])
    assert hash_of(2) == hash_of(3) != hash_of(3, port=6000)


def test_tls_config_is_what_the_broker_reads(tmp_path: Path) -> None:
    model = broker(tls={"secretName": "events-tls", "port": 5671})
    cfg = load(_mounted(tmp_path, model, {"u": "p"}))
    assert cfg.tls is not None and cfg.tls.port == 5671
    assert str(cfg.tls.certfile) == "/etc/streamlet/tls/tls.crt"
    assert str(cfg.tls.keyfile) == "/etc/streamlet/tls/tls.key"


def _access(cfg: model.BrokerConfig) -> tuple[tuple[str, ...], set[tuple[str, ...]]]:
    return cfg.vhosts, {(p.user, p.vhost, p.configure, p.write, p.read) for p in cfg.permissions}


DENY = ("", "", "")


@pytest.mark.parametrize(("spec", "users", "vhosts", "permissions", "problems"), [
    pytest.param({}, {"app": "p"}, ("/",), set(), 0, id="none: every user has full access"),
    pytest.param({"vhosts": ["/", "team-a", "team-b", "team-a"]}, {"app": "p"},
                 ("/", "team-a", "team-b"), set(), 0, id="vhosts, '/' always first, once each"),
    pytest.param({"vhosts": ["team-a"],
                  "permissions": [{"user": "app", "vhost": "team-a", "configure": "^app-",
                                   "write": "^app-", "read": ".*"},
                                  {"user": "app", "configure": "", "write": "", "read": "^pub$"},
                                  {"user": "ro"}]},
                 {"app": "p", "ro": "q"}, ("/", "team-a"),
                 {("app", "team-a", "^app-", "^app-", ".*"), ("app", "/", "", "", "^pub$"),
                  ("ro", "/", ".*", ".*", ".*")}, 0, id="permissions, the broker's defaults"),
    pytest.param({"permissions": [{"user": "app", "read": "(unclosed"}]}, {"app": "p"}, ("/",),
                 {("app", "/", ".*", ".*", "")}, 1, id="a bad regex denies instead"),
    pytest.param({"permissions": [{"user": "app", "vhost": "nowhere"}]}, {"app": "p"}, ("/",),
                 {("app", "/", *DENY)}, 1, id="unknown vhost: dropped, the user kept restricted"),
    pytest.param({"permissions": [{"user": "app", "vhost": "nowhere"}, {"user": "app"}]},
                 {"app": "p"}, ("/",), {("app", "/", ".*", ".*", ".*")}, 1,
                 id="unknown vhost: dropped, the user's other permission kept"),
    pytest.param({"permissions": [{"user": "app", "read": "a"}, {"user": "app", "read": "b"}]},
                 {"app": "p"}, ("/",), {("app", "/", ".*", ".*", "b")}, 1,
                 id="twice: the last one"),
    pytest.param({"permissions": [{"user": "cert-only", "write": ""}]}, {"app": "p"}, ("/",),
                 {("cert-only", "/", ".*", "", ".*")}, 0,
                 id="a user no Secret defines: still a valid config"),
    pytest.param({"permissions": [{"user": "streamlet-operator", "write": ""}]},
                 {"streamlet-operator": "p"}, ("/",), set(), 1,
                 id="never the operator's own user"),
])
def test_vhosts_and_permissions_as_the_broker_reads_them(
        tmp_path: Path, spec: dict[str, Any], users: dict[str, str], vhosts: tuple[str, ...],
        permissions: set[tuple[str, ...]], problems: int) -> None:
    model = broker(**spec)
    secret = next(m for m in build_all(model, 1, users) if m["kind"] == "Secret")
    users_text = base64.b64decode(secret["data"][names.USERS_KEY]).decode()
    path = _mounted(tmp_path, model, {})
    (tmp_path / "users.toml").write_text(users_text)  # the Secret as built, not render_users
    cfg = load(path)  # the broker's loader and its validation: no ConfigError
    assert _access(cfg) == (vhosts, permissions)
    assert cfg.config_permissions == (), "every permission is in the users file (reloaded)"
    assert len(plan_access(model).problems) == problems
    loaded = {u.name for u in cfg.users}
    assert set(users) | {p[0] for p in permissions} <= loaded


def test_followers_replicate_as_the_operator_whatever_the_other_users_are_called(
        tmp_path: Path) -> None:
    """The broker's replication user is the first one; "app" sorts before the operator's and
    may be restricted."""
    model = broker(permissions=[{"user": "app", "read": "^mine$"}])
    path = _mounted(tmp_path, model, {"app": "p", "streamlet-operator": "q", "aaa": "r"})
    assert load(path).replication_credentials == ("streamlet-operator", "q")


def test_a_user_only_permissions_name_has_a_password_nobody_knows() -> None:
    model = broker(permissions=[{"user": "cert-only"}])
    assert unknown_users(model, {"app": "p"}) == ["cert-only"]
    assert unknown_users(model, {"cert-only": "p"}) == []
    a = broker_users(model, {"app": "p"})
    assert a == broker_users(model, {"app": "p"}), "stable: the Secret does not churn"
    assert a["cert-only"] != broker_users(model, {"app": "other"})["cert-only"]
    assert len(a["cert-only"]) == 64


TLS = {"secretName": "events-tls", "port": 5671}


@pytest.mark.parametrize(("tls", "client", "operator", "peer"), [
    pytest.param(None, None, 5552, 5552, id="no TLS"),
    pytest.param(TLS, None, 5552, 5671,
                 id="TLS beside plain, no CA known: the operator in plaintext, the brokers on TLS"),
    pytest.param(TLS, ClientTls("ca"), 5671, 5671,
                 id="TLS beside plain: the operator and the brokers' links on TLS"),
    pytest.param({**TLS, "plainListener": False}, ClientTls("ca"), 5671, 5671,
                 id="TLS only: all on the TLS port"),
])
def test_the_ports_the_operator_and_the_brokers_reach_pods_on(
        tmp_path: Path, tls: dict[str, Any] | None, client: ClientTls | None, operator: int,
        peer: int) -> None:
    """The placement driver's requests go where the operator's sessions go; the brokers'
    replication links reach each other at their cluster.peers; an Assign names the leader by
    its client port, which every broker maps to that member's peer address."""
    model = broker(tls=tls) if tls else broker()
    assert operator_port(model, client) == operator
    assert model.peer_port == peer
    assert model.leader_port == (5671 if tls and tls.get("plainListener") is False else 5552)
    leader = ("events-0.events-headless.prod.svc.cluster.local", model.leader_port)
    assert named_peer(load(_mounted(tmp_path, model, {"u": "p"})).peers, leader) == 0
    assert model.replication_tls is (peer == 5671)
    cluster = load(_mounted(tmp_path, model, {"u": "p"}))
    assert cluster.replication_tls is model.replication_tls
    assert {p for _, p in cluster.peers} == {peer}


@pytest.mark.parametrize(("tls", "http", "https", "service"), [
    pytest.param(None, 15672, None, [], id="no TLS: HTTP on 15672, on no Service"),
    pytest.param({}, 15672, 15671, [15671],
                 id="TLS beside plain: HTTP kept, HTTPS on 15671 and the client Service"),
    pytest.param({"plainListener": False}, None, 15671, [15671],
                 id="TLS only: HTTPS only, no plaintext anywhere"),
    pytest.param({"management": False}, 15672, None, [], id="switched off: HTTP as before"),
    pytest.param({"plainListener": False, "management": False}, 15672, None, [],
                 id="TLS only, switched off: HTTP as before"),
])
def test_management_api_over_tls(tmp_path: Path, tls: dict[str, Any] | None, http: int | None,
                                  https: int | None, service: list[int]) -> None:
    """spec.tls.management (default on): the broker's [listeners.http] as it loads it, and
    the client Service's management-tls port."""
    model = broker(tls={**TLS, **tls}) if tls is not None else broker()
    cfg = load(_mounted(tmp_path, model, {"u": "p"}))
    assert cfg.http is not None and (cfg.http.port, cfg.http.tls_port) == (http, https)
    assert model.management_tls is (https is not None)
    manifests = {m["kind"] + "/" + m["metadata"]["name"]: m for m in build_all(model, 1, {})}
    client = manifests["Service/events"]["spec"]["ports"]
    assert [(p["port"], p["targetPort"]) for p in client if p["name"] == "management-tls"] == [
        (p, p) for p in service]
    headless = manifests["Service/events-headless"]["spec"]["ports"]
    assert not any(p["name"].startswith("management") for p in headless)


@pytest.mark.parametrize(("tls", "https"), [
    pytest.param(None, None, id="no TLS: HTTP on 15692 only"),
    pytest.param({}, 15691, id="TLS beside plain: HTTPS on 15691 beside HTTP"),
    pytest.param({"plainListener": False}, 15691,
                 id="TLS only: HTTPS beside HTTP, which the readinessProbe keeps"),
    pytest.param({"metrics": False}, None, id="switched off: HTTP only, as before"),
])
def test_metrics_over_tls(tmp_path: Path, tls: dict[str, Any] | None, https: int | None) -> None:
    """spec.tls.metrics (default on): the broker's [listeners.metrics] as it loads it, the
    container port metrics-tls and the headless Service's (where a ServiceMonitor scrapes);
    the readinessProbe stays on the plain port, on no Service the client one."""
    model = broker(tls={**TLS, **tls}) if tls is not None else broker()
    cfg = load(_mounted(tmp_path, model, {"u": "p"}))
    assert cfg.metrics is not None and (cfg.metrics.port, cfg.metrics.tls_port) == (15692, https)
    assert model.metrics_tls is (https is not None)
    manifests = {m["kind"] + "/" + m["metadata"]["name"]: m for m in build_all(model, 1, {})}
    container = manifests["StatefulSet/events"]["spec"]["template"]["spec"]["containers"][0]
    want = [("metrics", 15692)] + ([("metrics-tls", https)] if https else [])
    assert [(p["name"], p["containerPort"]) for p in container["ports"]
            if p["name"].startswith("metrics")] == want
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
    headless = manifests["Service/events-headless"]["spec"]["ports"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in headless
            if p["name"].startswith("metrics")] == [(name, port, name) for name, port in want]
    client = manifests["Service/events"]["spec"]["ports"]
    assert not any(p["name"].startswith("metrics") for p in client)


@pytest.mark.parametrize(("tls", "cafile", "verify", "plain"), [
    pytest.param({}, None, False, True, id="server side only"),
    pytest.param({"verifyPeer": True}, "/etc/streamlet/tls/ca.crt", True, True,
                 id="mTLS: the CA of the same Secret (cert-manager's ca.crt)"),
    pytest.param({"caSecretName": "clients-ca"}, "/etc/streamlet/tls-ca/ca.crt", False, True,
                 id="a CA of its own, certificates optional (EXTERNAL when given)"),
    pytest.param({"plainListener": False}, "/etc/streamlet/tls/ca.crt", False, False,
                 id="TLS only: the CA the brokers check each other with"),
    pytest.param({"plainListener": False, "verifyPeer": True, "caSecretName": "ca"},
                 "/etc/streamlet/tls-ca/ca.crt", True, False, id="TLS only and mTLS"),
])
def test_tls_modes(tmp_path: Path, tls: dict[str, Any], cafile: str | None, verify: bool,
                   plain: bool) -> None:
    model = broker(tls={**TLS, **tls}, advertise={"port": 30671} if not plain else {})
    cfg = load(_mounted(tmp_path, model, {"u": "p"}))
    assert cfg.tls is not None and cfg.tls.port == 5671
    assert (str(cfg.tls.cafile) if cfg.tls.cafile else None) == cafile
    assert cfg.tls.verify_peer is verify
    assert [(lst.port, lst.tls) for lst in cfg.listeners if lst.protocol == "rabbitmq"] == (
        [(5552, False)] if plain else []) + [(5671, True)]
    if not plain:
        assert cfg.tls.advertised_port == 30671  # advertise.port is the TLS clients' then
    # plain listener or not, the brokers replicate over TLS, reaching each other on the TLS port
    assert cfg.replication_tls
    assert cfg.peers[0] == ("events-0.events-headless.prod.svc.cluster.local", 5671)
    manifests = {m["kind"] + "/" + m["metadata"]["name"]: m for m in build_all(model, 1, {})}
    pod = manifests["StatefulSet/events"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ("stream" in ports) is plain and ports["stream-tls"] == 5671
    probe = "stream" if plain else "stream-tls"
    # readiness is the broker's /ready on the metrics port, TLS or not
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
    assert container["livenessProbe"]["tcpSocket"]["port"] == probe
    for service in ("Service/events", "Service/events-headless"):
        names_ = {p["name"] for p in manifests[service]["spec"]["ports"]}
        assert ("stream" in names_) is plain and "stream-tls" in names_
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "events-tls"}
    if cafile and cafile.startswith("/etc/streamlet/tls-ca"):
        assert mounts["tls-ca"] == "/etc/streamlet/tls-ca"
        assert volumes["tls-ca"]["secret"]["secretName"] == tls["caSecretName"]
    else:
        assert "tls-ca" not in volumes
    assert model.client_port == (5552 if plain else 5671)


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
    assert broker_container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert sidecar["image"] == "busybox:1.36"


def test_config_change_rolls_pods() -> None:
    a = build_statefulset(broker(), 1)["spec"]["template"]["metadata"]["annotations"]
    b = build_statefulset(broker(retention={"maxAge": "1D"}), 1)
    assert a != b["spec"]["template"]["metadata"]["annotations"]


def test_scale_down_guard_keeps_replicas() -> None:
    assert build_statefulset(broker(replicas=1), 3)["spec"]["replicas"] == 3


def test_directory_names_each_stream_s_pod_as_the_pod_advertises_it() -> None:
    model = broker(replicas=3)
    placed = [Placed("orders", 1, (("orders", 2),)),
              Placed("inv", 2, (("inv-0", 0), ("inv-1", 0)))]
    text = render_directory(placed, lambda o: f"{advertised_host(model, o)}:5552")
    directory = parse_directory(text)  # what the broker reads
    assert directory.leader("/", "orders") == ("events-2.events-headless.prod.svc.cluster.local",
                                               5552)
    assert directory.leader("/", "inv-1") == ("events-0.events-headless.prod.svc.cluster.local",
                                              5552)
    ss = directory.super_stream("/", "inv")
    assert ss is not None and ss.route("1") == ["inv-1"]  # brokers.py's binding keys
    assert text == render_directory(reversed(placed), lambda o: f"{advertised_host(model, o)}:5552")
    # a pod whose address is unknown (PodIP before it runs) is left out, not guessed
    assert parse_directory(render_directory(placed, lambda o: None)).streams == {}
    cm = build_directory_configmap(model, text)
    assert cm["metadata"]["name"] == "events-directory" and cm["data"] == {"streams.json": text}


def test_advertised_host_matches_the_pod_env() -> None:
    """The directory must name a pod exactly as the pod advertises itself (its env)."""
    for spec, pod_name in (({}, "events-1"), (SPECS["template"], "events-1")):
        model = broker(**spec)
        env = _env(build_statefulset(model, 2))["STREAMLET_ADVERTISED_HOST"]
        assert advertised_host(model, 1) == env.replace("$(POD_NAME)", pod_name)
    assert advertised_host(broker(advertise={"mode": "PodIP"}), 1) is None


def test_directory_volume_is_live_and_optional() -> None:
    spec = build_statefulset(broker(), 1)["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "directory")
    assert volume["configMap"] == {"name": "events-directory", "optional": True}
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "directory")
    assert "subPath" not in mount  # subPath mounts never see ConfigMap updates


def test_pre_stop_waits_for_endpoints_and_sigterm_drains() -> None:
    container = build_statefulset(broker(), 1)["spec"]["template"]["spec"]["containers"][0]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == PRE_STOP == ["sleep", "5"]


TLS_PEER = {"secretName": "events-tls", "verifyPeer": True}
READ_X = [{"user": "a", "read": "x"}]


@pytest.mark.parametrize(("users", "spec", "secret_changes", "rolls"), [
    pytest.param({"a": "2"}, {}, True, False, id="a password"),
    pytest.param({"a": "1", "b": "3"}, {}, True, False, id="a user added"),
    pytest.param({"a": "1"}, {"tls": TLS_PEER}, False, True, id="TLS turned on (the config)"),
    pytest.param({"a": "1"}, {"permissions": READ_X}, True, False, id="a first permission"),
    pytest.param({"a": "1"}, {"permissions": [{"user": "a", "read": "("}]}, True, False,
                 id="a bad permission (denies all)"),
    pytest.param({"a": "1"}, {"permissions": [{"user": "new"}]}, True, False,
                 id="a permission of a user no Secret defines"),
    pytest.param({"a": "1"}, {"vhosts": ["team-a"]}, False, True, id="a vhost"),
])
def test_users_and_permissions_do_not_roll_pods_vhosts_do(
        users: dict[str, str], spec: dict[str, Any], secret_changes: bool, rolls: bool) -> None:
    """The broker reloads its users file, which holds users and permissions together (no
    restart); the config, which holds the vhosts, it reads at start only."""
    def manifests(users: dict[str, str], **spec: Any) -> dict[str, Any]:
        return {m["kind"]: m for m in build_all(broker(**spec), 1, users)}

    before, after = manifests({"a": "1"}), manifests(users, **spec)
    assert (before["Secret"] != after["Secret"]) == secret_changes
    assert (before["StatefulSet"]["spec"]["template"]
            != after["StatefulSet"]["spec"]["template"]) == rolls
    assert (before["ConfigMap"] != after["ConfigMap"]) == rolls


def test_with_tls_a_password_does_not_roll_pods() -> None:
    def template(users: dict[str, str]) -> Any:
        sts = next(m for m in build_all(broker(tls=TLS_PEER), 1, users) if m["kind"] == "StatefulSet")
        return sts["spec"]["template"]
    assert template({"a": "1"}) == template({"a": "2"})


def test_permissions_land_in_the_users_secret_not_the_config() -> None:
    model = broker(vhosts=["team-a"], permissions=[
        {"user": "app", "vhost": "team-a", "configure": "", "write": "^w$", "read": "^r$"}])
    found = {m["kind"]: m for m in build_all(model, 1, {"app": "p", "streamlet-operator": "q"})}
    users_text = base64.b64decode(found["Secret"]["data"][names.USERS_KEY]).decode()
    config_text = found["ConfigMap"]["data"][names.CONFIG_KEY]
    assert tomllib.loads(users_text)["permissions"] == [
        {"user": "app", "vhost": "team-a", "configure": "", "write": "^w$", "read": "^r$"}]
    assert [u["name"] for u in tomllib.loads(users_text)["users"]] == ["streamlet-operator", "app"]
    assert "permissions" not in tomllib.loads(config_text)
    assert tomllib.loads(config_text)["vhosts"] == [{"name": "/"}, {"name": "team-a"}]


def test_the_operator_rolls_the_pods_and_any_template_change_shows_in_the_hash() -> None:
    """OnDelete: the StatefulSet controller only makes a deleted pod again; the operator rolls
    (rolling.py), comparing each pod's template hash with the StatefulSet's."""
    def template(model: BrokerModel, replicas: int = 1) -> Any:
        sts = build_statefulset(model, replicas)
        assert sts["spec"]["updateStrategy"] == {"type": "OnDelete", "rollingUpdate": None}
        return sts["spec"]["template"]

    base = template(broker())
    revision = base["metadata"]["annotations"][TEMPLATE_HASH]
    assert revision == template_hash(base)
    assert template(broker(), 5)["metadata"]["annotations"][TEMPLATE_HASH] == revision
    for changed in (broker(image="ghcr.io/streamlet/broker:0.2.0"),
                    broker(retention={"maxAge": "1D"}),
                    broker(podTemplate={"metadata": {"annotations": {"x": "y"}}})):
        assert template(changed)["metadata"]["annotations"][TEMPLATE_HASH] != revision


def test_pods_spread_over_nodes_and_zones_when_they_can() -> None:
    """Preferred, never required: a one-node kind cluster still schedules every pod."""
    spec = build_statefulset(broker(), 3)["spec"]["template"]["spec"]
    selector = {"matchLabels": names.selector("events")}
    (term,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"labelSelector": selector,
                                       "topologyKey": "kubernetes.io/hostname"}
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"][
        "podAntiAffinity"]
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway" and spread["labelSelector"] == selector
    # a podTemplate may replace them
    custom = [{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": selector}]
    spec = build_statefulset(broker(podTemplate={"spec": {"topologySpreadConstraints": custom}}),
                             3)["spec"]["template"]["spec"]
    assert spec["topologySpreadConstraints"] == custom
