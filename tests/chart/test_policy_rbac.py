"""The chart's least privilege: rbac.scope=namespace (Roles in the watched namespaces, almost
nothing cluster-wide), the operator watching only those, and the replicas' Lease (a Role in the
release's namespace whatever the scope: create, then get and patch that one Lease only)."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from streamlet_operator.exports import SPARK_CRD
from tests.chart.conftest import CHART, KUBE_VERSIONS
from tests.chart.test_chart import is_lease, is_spark, render

helm_python.disable_logging()

NAMESPACED: dict[str, Any] = {"rbac": {"scope": "namespace"}}
TEAMS: dict[str, Any] = {"rbac": {"scope": "namespace"}, "operator": {"watchNamespaces": ["team-a", "team-b"],
                                                     "replicas": 2}}
#: (test_chart.py renders, validates and lints the chart with each of these too)
VALUE_SETS: dict[str, dict[str, Any]] = {"namespace": NAMESPACED, "namespace-teams": TEAMS,
              "cluster-two-replicas": {"operator": {"replicas": 2}},
              "cluster-teams": {"operator": {"watchNamespaces": ["team-a"]}}}


def _kinds(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The operator's objects of a kind (the export jobs' RBAC, on by default, left out:
    test_spark_rbac.py; the Lease's too: test_the_lease_is_held_in_the_release_namespace)."""
    return [d for d in docs if d["kind"] == kind and not is_spark(d) and not is_lease(d)]


def _grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def _args(docs: list[dict[str, Any]]) -> list[str]:
    [deployment] = _kinds(docs, "Deployment")
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_kopf_peering_crds_are_valid_for_kubernetes(version: str) -> None:
    crds = list(yaml.safe_load_all((CHART / "crds" / "kopf.dev_peerings.yaml").read_text()))
    assert {(c["spec"]["names"]["kind"], c["spec"]["scope"]) for c in crds} == {
        ("ClusterKopfPeering", "Cluster"), ("KopfPeering", "Namespaced")}
    for crd in crds:
        kubernetes_validate.validate(crd, version, strict=True)
        assert crd["spec"]["group"] == "kopf.dev"  # where kopf looks first
        # kopf patches the status through the object: a status subresource would drop it
        assert "subresources" not in crd["spec"]["versions"][0]


def test_namespace_scope_defaults_to_the_release_namespace(chart: helm_python.Chart) -> None:
    docs = render(chart, NAMESPACED)
    [role] = _kinds(docs, "Role")
    [binding] = _kinds(docs, "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "streamlet-system"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    [sa] = _kinds(docs, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": "streamlet-system"}]
    assert "--namespace=streamlet-system" in _args(docs)
    assert "--lease=streamlet-operator" in _args(docs)


def test_namespace_scope_grants_roles_in_the_watched_namespaces(chart: helm_python.Chart) -> None:
    docs = render(chart, TEAMS)
    roles = {r["metadata"]["namespace"]: r for r in _kinds(docs, "Role")}
    bindings = {b["metadata"]["namespace"] for b in _kinds(docs, "RoleBinding")}
    assert set(roles) == bindings == {"team-a", "team-b"}
    assert [a for a in _args(docs) if a.startswith("--namespace")] == [
        "--namespace=team-a", "--namespace=team-b"]
    for role in roles.values():
        granted = _grants(role["rules"])
        # never watched; listed (by label) and deleted: the export users' Secrets
        assert granted[("", "secrets")] == {"get", "list", "create", "patch", "delete"}
        assert granted[("streamlet.dev", "brokers")] == {"get", "list", "watch", "patch",
                                                          "update"}
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            assert "deletecollection" not in rule["verbs"]
    # cluster-wide: one CRD read by name, StorageClasses read (growing storage), Nodes read
    # (their zone labels)
    [cluster_role] = _kinds(docs, "ClusterRole")
    assert cluster_role["rules"] == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "resourceNames": ["scheduledsparkapplications.sparkoperator.k8s.io"], "verbs": ["get"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"],
         "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    [cluster_binding] = _kinds(docs, "ClusterRoleBinding")
    assert cluster_binding["roleRef"]["name"] == cluster_role["metadata"]["name"]


def test_the_spark_crd_the_namespaced_role_names_is_the_one_the_operator_reads() -> None:
    assert SPARK_CRD == "scheduledsparkapplications.sparkoperator.k8s.io"


def test_both_scopes_grant_the_same_in_a_namespace(chart: helm_python.Chart) -> None:
    """The namespaced Role is the ClusterRole's rules minus what is cluster-scoped."""
    [cluster_role] = _kinds(render(chart), "ClusterRole")
    [role] = _kinds(render(chart, NAMESPACED), "Role")
    cluster = _grants(cluster_role["rules"])
    del cluster[("apiextensions.k8s.io", "customresourcedefinitions")]
    del cluster[("storage.k8s.io", "storageclasses")]
    del cluster[("", "nodes")]
    assert _grants(role["rules"]) == cluster


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_the_lease_is_held_in_the_release_namespace(chart: helm_python.Chart,
                                                    values: dict[str, Any]) -> None:
    docs = render(chart, values)
    assert "--lease=streamlet-operator" in _args(docs)
    assert not [a for a in _args(docs) if a.startswith("--peering")]
    assert not [d for d in docs if d["apiVersion"].startswith("kopf.dev/")]
    [role] = [d for d in docs if d["kind"] == "Role" and is_lease(d)]
    [binding] = [d for d in docs if d["kind"] == "RoleBinding" and is_lease(d)]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "streamlet-system"
    # made once (create cannot be limited to a name), then only that Lease read and patched
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": ["streamlet-operator"], "verbs": ["get", "patch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    [sa] = _kinds(docs, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": "streamlet-system"}]
    # nothing else grants Leases or kopf's peering objects
    for other in _kinds(docs, "Role") + _kinds(docs, "ClusterRole"):
        assert not [k for k in _grants(other["rules"])
                    if k[0] in ("coordination.k8s.io", "kopf.dev")]
    # the Lease's namespace is the operator's own, from its pod
    env = _kinds(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "STREAMLET_OPERATOR_NAMESPACE",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in env


def test_two_replicas_share_the_lease(chart: helm_python.Chart) -> None:
    docs = render(chart, VALUE_SETS["cluster-two-replicas"])
    [deployment] = _kinds(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert "--lease=streamlet-operator" in _args(docs)
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    # each replica's identity in the Lease: its pod's name
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env


def test_rbac_off_renders_no_role(chart: helm_python.Chart) -> None:
    docs = render(chart, {"rbac": {"create": False, "scope": "namespace"}})
    # none for the export jobs either, though spark.serviceAccount.create is on by default
    assert not [d for d in docs if d["kind"] in (
        "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding") or is_spark(d)]
    assert "--lease=streamlet-operator" in _args(docs)  # granted by whoever grants the rest


@pytest.mark.parametrize("values", [
    {"rbac": {"scope": "everywhere"}},
    {"operator": {"replicas": 0}},
    {"operator": {"image": {"tag": "latest"}}},
], ids=["bad-scope", "zero-replicas", "latest-tag"])
def test_values_schema_refuses(chart: helm_python.Chart, values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmError):
        render(chart, values)
