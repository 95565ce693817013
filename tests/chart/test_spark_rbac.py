"""The chart's Spark ServiceAccount, Role and RoleBinding (spark.serviceAccount.create, on by
default): the name the operator's export jobs run as, in each of spark.namespaces, else each
namespace the operator watches, else the release's; valid for Kubernetes and lint-clean; none
with spark.serviceAccount.create or rbac.create off."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest

from streamlet_operator.builders.export import SERVICE_ACCOUNT
from tests.chart.conftest import CHART, KUBE_VERSIONS
from tests.chart.test_chart import render

helm_python.disable_logging()

ON: dict[str, Any] = {"spark": {"serviceAccount": {"create": True}}}
TEAMS: dict[str, Any] = {"spark": {"serviceAccount": {"create": True, "annotations": {"a": "b"}},
                                   "namespaces": ["team-a", "team-b"]}}
SPARK_KINDS = ("ServiceAccount", "Role", "RoleBinding")


def spark_docs(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, namespace) -> each object named for Spark."""
    return {(d["kind"], d["metadata"]["namespace"]): d for d in docs
            if d["kind"] in SPARK_KINDS
            and d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "streamlet-spark"}


@pytest.mark.parametrize(("values", "namespaces"), [
    ({}, ["streamlet-system"]),
    ({"operator": {"watchNamespaces": ["team-a", "team-b"]}}, ["team-a", "team-b"]),
    ({"rbac": {"scope": "namespace"}}, ["streamlet-system"]),
    ({"operator": {"watchNamespaces": ["team-a"]}, "spark": {"namespaces": ["lake"]}}, ["lake"]),
], ids=["release-namespace", "watched-namespaces", "namespace-scope", "named-over-watched"])
def test_on_by_default_where_the_streams_are(chart: helm_python.Chart, values: dict[str, Any],
                                             namespaces: list[str]) -> None:
    made = spark_docs(render(chart, values))
    assert sorted(made) == sorted((kind, ns) for kind in SPARK_KINDS for ns in namespaces)


@pytest.mark.parametrize("values", [
    {"spark": {"serviceAccount": {"create": False}}},
    {"rbac": {"create": False}},
    {"rbac": {"create": False}, "spark": {"namespaces": ["team-a"]}},
], ids=["spark-off", "rbac-off", "rbac-off-named-namespaces"])
def test_off_switches(chart: helm_python.Chart, values: dict[str, Any]) -> None:
    docs = render(chart, values)
    assert spark_docs(docs) == {}
    assert not [d for d in docs if d["metadata"]["name"] == SERVICE_ACCOUNT]


@pytest.mark.parametrize("values", [ON, TEAMS], ids=["release-namespace", "teams"])
@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_valid_for_kubernetes(chart: helm_python.Chart, values: dict[str, Any],
                              version: str) -> None:
    made = spark_docs(render(chart, values))
    assert made
    for doc in made.values():
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("values", [ON, TEAMS], ids=["release-namespace", "teams"])
def test_lint_is_clean(values: dict[str, Any]) -> None:
    result = helm_python.lint(CHART, values, strict=True, kube_version="1.30.0", quiet=True)
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize(("values", "namespaces"), [
    (ON, ["streamlet-system"]), (TEAMS, ["team-a", "team-b"])], ids=["release-namespace", "teams"])
def test_what_a_driver_needs_bound_to_the_operators_name(
        chart: helm_python.Chart, values: dict[str, Any], namespaces: list[str]) -> None:
    made = spark_docs(render(chart, values))
    assert sorted(made) == sorted((kind, ns) for kind in SPARK_KINDS for ns in namespaces)
    for ns in namespaces:
        assert made[("ServiceAccount", ns)]["metadata"]["name"] == SERVICE_ACCOUNT
        role = made[("Role", ns)]
        granted = {r: set(rule["verbs"]) for rule in role["rules"] for r in rule["resources"]}
        for resource in ("pods", "services", "configmaps", "persistentvolumeclaims"):
            assert {"create", "get", "list", "watch", "delete"} <= granted[resource]
        binding = made[("RoleBinding", ns)]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": role["metadata"]["name"]}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                                        "namespace": ns}]
    if values is TEAMS:
        assert made[("ServiceAccount", "team-a")]["metadata"]["annotations"] == {"a": "b"}


@pytest.mark.parametrize("values", [
    {"spark": {"serviceAccount": {"name": "other"}}},
    {"spark": {"namespaces": ["Not_A_Namespace"]}},
    {"spark": {"unknown": True}},
], ids=["name-the-operator-does-not-use", "bad-namespace", "unknown-key"])
def test_values_schema_refuses(chart: helm_python.Chart, values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmError):
        render(chart, values)
