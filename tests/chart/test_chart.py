"""The chart, rendered and linted by Helm's own library, every manifest checked by Kubernetes'
own schemas, the optional Broker by its CRD's schema."""

from __future__ import annotations

import copy
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from tests.chart.conftest import CHART, KUBE_VERSIONS, crd_schema
from tests.chart.schema import validate

helm_python.disable_logging()


def render(chart: helm_python.Chart, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    out = chart.render(values or {}, name="streamlet", namespace="streamlet-system",
                       is_install=True)
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def chart_crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> schema of every CRD the chart installs (its crds/)."""
    schemas = {}
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            for version in crd["spec"]["versions"]:
                key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
                # every object has these, whatever its schema says
                schema["properties"].update(apiVersion={"type": "string"},
                                            kind={"type": "string"})
                schemas[key] = schema
    return schemas


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def is_spark(doc: dict[str, Any]) -> bool:
    """One of the export jobs' ServiceAccount, Role and RoleBinding (test_spark_rbac.py)."""
    labels = doc["metadata"].get("labels") or {}
    return bool(labels.get("app.kubernetes.io/name") == "streamlet-spark")


def is_lease(doc: dict[str, Any]) -> bool:
    """The Role and RoleBinding of the operator replicas' Lease (test_policy_rbac.py)."""
    return doc["kind"] in ("Role", "RoleBinding") and doc["metadata"]["name"].endswith("-lease")


def operator_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the chart renders for the operator: everything but the export jobs' RBAC."""
    return [d for d in docs if not is_spark(d)]


VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything": {
        "broker": {"create": True, "spec": {"replicas": 3, "usersSecret": "app-users",
                                            "streams": {"defaultReplicas": 3}}},
        "operator": {"watchNamespaces": ["team-a", "team-b"], "verbose": True,
                     "imagePullSecrets": [{"name": "regcred"}],
                     "nodeSelector": {"kubernetes.io/os": "linux"},
                     "tolerations": [{"key": "k", "operator": "Exists"}]},
        "serviceAccount": {"annotations": {"a": "b"}},
    },
    "minimal": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "x"},
                "operator": {"metrics": {"enabled": False}}},
    # least privilege (test_policy_rbac.py): namespaced RBAC, named namespaces, two replicas
    "rbac-namespace": {"rbac": {"scope": "namespace"}},
    "rbac-namespace-teams": {"rbac": {"scope": "namespace"}, "operator": {
        "watchNamespaces": ["team-a", "team-b"], "replicas": 2}},
    "rbac-cluster-two-replicas": {"operator": {"replicas": 2}},
    "rbac-cluster-teams": {"operator": {"watchNamespaces": ["team-a"]}},
}


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_every_manifest_is_valid(chart: helm_python.Chart, values: dict[str, Any],
                                 version: str) -> None:
    docs = render(chart, values)
    assert docs
    custom = chart_crd_schemas()
    for doc in docs:
        if doc["apiVersion"].startswith("streamlet.dev/"):
            validate(doc, crd_schema(doc["kind"]))
        elif (doc["apiVersion"], doc["kind"]) in custom:  # none since the Lease; kept
            validate(doc, custom[(doc["apiVersion"], doc["kind"])])
        else:
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_lint_is_clean(values: dict[str, Any]) -> None:
    result = helm_python.lint(CHART, values, strict=True, kube_version="1.30.0", quiet=True)
    assert result["errors"] == []
    serious = [m for m in result["messages"] if m["severity"] >= 2]  # warnings and errors
    assert serious == []


def test_default_install(chart: helm_python.Chart) -> None:
    every = render(chart)
    # the export jobs' ServiceAccount, Role and RoleBinding too (test_spark_rbac.py)
    assert sorted((d["kind"], d["metadata"]["namespace"]) for d in every if is_spark(d)) == [
        ("Role", "streamlet-system"), ("RoleBinding", "streamlet-system"),
        ("ServiceAccount", "streamlet-system")]
    docs = operator_docs(every)
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole", "ClusterRoleBinding", "Deployment", "Role", "RoleBinding", "Service",
        "ServiceAccount"]
    assert all(is_lease(d) for d in docs if d["kind"] in ("Role", "RoleBinding"))
    deployment = by_kind(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    # the Lease: a new pod waits while the old one holds it, so a rolling update is safe
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "ghcr.io/streamlet/operator:0.1.0"
    assert container["args"] == ["--liveness=http://0.0.0.0:8080/healthz",
                                 "--lease=streamlet-operator"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["serviceAccountName"] == by_kind(docs, "ServiceAccount")["metadata"]["name"]
    binding = by_kind(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == by_kind(docs, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == "streamlet-system"


def test_rbac_is_least_privilege(chart: helm_python.Chart) -> None:
    rules = by_kind(render(chart), "ClusterRole")["rules"]
    granted = {(g, r): set(rule["verbs"]) for rule in rules
               for g in rule["apiGroups"] for r in rule["resources"]}
    # Deleting only an export schedule and its user's Secret (spec.export removed) and a pod
    # to roll it (OnDelete); never collections.
    schedules = {("batch", "cronjobs"), ("sparkoperator.k8s.io", "scheduledsparkapplications")}
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "deletecollection" not in rule["verbs"]
    # ... and the StatefulSet, its pods orphaned, to make it again with larger volumes, and a
    # Broker's NetworkPolicy when it is turned off
    assert {key for key, verbs in granted.items() if "delete" in verbs} == schedules | {
        ("", "pods"), ("apps", "statefulsets"), ("", "secrets"),
        ("networking.k8s.io", "networkpolicies")}
    assert granted[("networking.k8s.io", "networkpolicies")] == {"get", "create", "patch",
                                                                  "delete"}
    for key in schedules:
        assert granted[key] == {"get", "create", "patch", "delete"}
    assert granted[("batch", "jobs")] == {"list"}  # the last run's outcome
    assert granted[("apiextensions.k8s.io", "customresourcedefinitions")] == {
        "get", "list", "watch"}  # kopf's discovery; the Spark operator's CRD
    assert not [key for key in granted if key[0] in ("kopf.dev", "coordination.k8s.io")]
    assert ("", "namespaces") not in granted  # kopf lists none when watching all
    assert granted[("", "secrets")] == {"get", "list", "create", "patch", "delete"}
    assert granted[("streamlet.dev", "streams/status")] == {"get", "patch", "update"}
    assert granted[("apps", "statefulsets")] == {"get", "create", "patch", "delete"}
    # growing storage: the PVCs patched when their StorageClass allows expansion
    assert granted[("", "persistentvolumeclaims")] == {"get", "patch"}
    assert granted[("storage.k8s.io", "storageclasses")] == {"get", "list"}
    # zones: the Nodes' topology.kubernetes.io/zone labels, read only
    assert granted[("", "nodes")] == {"get", "list"}
    # a pod's IP for the directory (advertise PodIP); pods being deleted (placement driver);
    # the roll deletes one pod at a time
    assert granted[("", "pods")] == {"get", "list", "delete"}


def test_watch_namespaces_and_broker(chart: helm_python.Chart) -> None:
    docs = render(chart, VALUE_SETS["everything"])
    args = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[2:] == ["--namespace=team-a", "--namespace=team-b", "--verbose"]
    broker = by_kind(docs, "Broker")
    assert broker["metadata"] == {**broker["metadata"], "name": "streamlet",
                                  "namespace": "streamlet-system"}
    assert broker["spec"]["replicas"] == 3 and broker["spec"]["usersSecret"] == "app-users"
    assert broker["spec"]["streams"] == {"defaultReplicas": 3}


def test_metrics_can_be_turned_off(chart: helm_python.Chart) -> None:
    docs = render(chart, VALUE_SETS["minimal"])
    assert sorted(d["kind"] for d in docs) == ["Deployment"]
    env = {e["name"]: e.get("value") for e in
           by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STREAMLET_OPERATOR_METRICS_PORT"] == "0"


@pytest.mark.parametrize("values", [
    {"operator": {"image": {"repository": ""}}},
    {"operator": {"watchNamespaces": ["Not_A_Namespace"]}},
    {"operator": {"metrics": {"port": 70000}}},
    {"broker": {"spec": {"replicas": 0}}},
    {"broker": {"spec": {"streams": {"defaultReplicas": 8}}}},
    {"unknownKey": True},
], ids=["empty-image", "bad-namespace", "bad-port", "zero-replicas", "eight-default-replicas",
        "unknown-key"])
def test_values_schema_refuses(chart: helm_python.Chart, values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmError):
        render(chart, values)
