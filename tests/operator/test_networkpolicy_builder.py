"""A Broker's NetworkPolicy for several specs: which peers reach which ports (a table), valid
for Kubernetes (kubernetes-validate, strict), the spec valid against the Broker CRD."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from streamlet_operator.builders.networkpolicy import build_networkpolicy
from streamlet_operator.model import BrokerModel
from tests.chart.conftest import KUBE_VERSIONS, crd_schema
from tests.chart.schema import validate

SELF = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "streamlet-broker",
                                        "app.kubernetes.io/instance": "events"}}}
EXPORTS = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "streamlet-export"}}}
OPERATOR_POD = {"matchLabels": {"app.kubernetes.io/name": "streamlet-operator"}}
OPERATOR = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
            "podSelector": OPERATOR_POD}
ANYWHERE = None  # a rule without "from": every source, in the cluster or outside
EVERY_NAMESPACE: list[dict[str, Any]] = [{"namespaceSelector": {}}]
OWN_NAMESPACE: list[dict[str, Any]] = [{"podSelector": {}}]
TEAM_A = {"matchLabels": {"team": "a"}}
MONITORING = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                    "values": ["monitoring"]}]}
TLS = {"secretName": "events-tls"}

# spec -> {port: sources} for (clients, own pods + operator + exports, metrics, management);
# the management ports are 15672 unless "management_ports" says otherwise, the metrics ports
# 15692 unless "metrics_ports" does
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "defaults": ({}, {
        "clients": ([5552], ANYWHERE), "own": [5552],
        "metrics": EVERY_NAMESPACE, "management": OWN_NAMESPACE}),
    # the brokers replicate over the TLS port: their own pods reach it
    "tls-beside-plain": ({"tls": TLS, "port": 6000}, {
        "clients": ([6000, 5551], ANYWHERE), "own": [6000, 5551],
        "metrics": EVERY_NAMESPACE, "management": OWN_NAMESPACE,
        "management_ports": [15672, 15671], "metrics_ports": [15692, 15691]}),
    "tls-only": ({"tls": {**TLS, "plainListener": False, "port": 7000}}, {
        "clients": ([7000], ANYWHERE), "own": [7000],
        "metrics": EVERY_NAMESPACE, "management": OWN_NAMESPACE,
        "management_ports": [15671], "metrics_ports": [15692, 15691]}),
    "tls-only-management-in-plain-http": (
        {"tls": {**TLS, "plainListener": False, "management": False},
         "networkPolicy": {"managementNamespaces": TEAM_A}}, {
            "clients": ([5551], ANYWHERE), "own": [5551],
            "metrics": EVERY_NAMESPACE, "management": [{"namespaceSelector": TEAM_A}],
            "management_ports": [15672], "metrics_ports": [15692, 15691]}),
    "tls-metrics-in-plain-http-from-monitoring": (
        {"tls": {**TLS, "metrics": False}, "networkPolicy": {"metricsNamespaces": MONITORING}}, {
            "clients": ([5552, 5551], ANYWHERE), "own": [5552, 5551],
            "metrics": [{"namespaceSelector": MONITORING}], "management": OWN_NAMESPACE,
            "management_ports": [15672, 15671]}),
    "tls-metrics-from-monitoring": (
        {"tls": TLS, "networkPolicy": {"metricsNamespaces": MONITORING}}, {
            "clients": ([5552, 5551], ANYWHERE), "own": [5552, 5551],
            "metrics": [{"namespaceSelector": MONITORING}], "management": OWN_NAMESPACE,
            "management_ports": [15672, 15671], "metrics_ports": [15692, 15691]}),
    "tls-management-from-selected-namespaces": (
        {"tls": TLS, "networkPolicy": {"managementNamespaces": TEAM_A}}, {
            "clients": ([5552, 5551], ANYWHERE), "own": [5552, 5551],
            "metrics": EVERY_NAMESPACE, "management": [{"namespaceSelector": TEAM_A}],
            "management_ports": [15672, 15671], "metrics_ports": [15692, 15691]}),
    "selected-namespaces": ({"networkPolicy": {
        "clientNamespaces": TEAM_A, "metricsNamespaces": MONITORING,
        "managementNamespaces": TEAM_A}}, {
        "clients": ([5552], [{"namespaceSelector": TEAM_A}]), "own": [5552],
        "metrics": [{"namespaceSelector": MONITORING}],
        "management": [{"namespaceSelector": TEAM_A}]}),
    "clients-from-the-cluster-only": ({"networkPolicy": {"enabled": True,
                                                          "clientNamespaces": {}}}, {
        "clients": ([5552], EVERY_NAMESPACE), "own": [5552],
        "metrics": EVERY_NAMESPACE, "management": OWN_NAMESPACE}),
}


def broker(spec: dict[str, Any]) -> BrokerModel:
    return BrokerModel.from_body({"metadata": {"name": "events", "namespace": "prod",
                                               "uid": "1234"}, "spec": spec})


def _ports(rule: dict[str, Any]) -> list[int]:
    assert all(p["protocol"] == "TCP" for p in rule["ports"])
    return [p["port"] for p in rule["ports"]]


@pytest.mark.parametrize(("spec", "want"), CASES.values(), ids=CASES.keys())
def test_policy_per_spec(spec: dict[str, Any], want: dict[str, Any]) -> None:
    policy = build_networkpolicy(broker(spec), "ops")
    assert policy is not None
    assert policy["metadata"]["name"] == "events"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "1234"
    body = policy["spec"]
    assert body["podSelector"] == SELF["podSelector"]
    assert body["policyTypes"] == ["Ingress"]  # egress stays open
    clients, own, metrics, management = body["ingress"]
    ports, sources = want["clients"]
    assert (_ports(clients), clients.get("from")) == (ports, sources)
    assert (_ports(own), own["from"]) == (want["own"], [SELF, EXPORTS, OPERATOR])
    assert (_ports(metrics), metrics["from"]) == (
        want.get("metrics_ports", [15692]), want["metrics"])
    assert (_ports(management), management["from"]) == (
        want.get("management_ports", [15672]), want["management"])


def test_operator_from_any_namespace_when_its_own_is_unknown() -> None:
    policy = build_networkpolicy(broker({}), None)
    assert policy is not None
    assert policy["spec"]["ingress"][1]["from"][2] == {"namespaceSelector": {},
                                                       "podSelector": OPERATOR_POD}


def test_turned_off_builds_nothing() -> None:
    assert build_networkpolicy(broker({"networkPolicy": {"enabled": False}}), "ops") is None
    assert build_networkpolicy(broker({"networkPolicy": {}}), "ops") is not None


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize(("spec", "want"), CASES.values(), ids=CASES.keys())
def test_policy_is_valid_for_kubernetes(spec: dict[str, Any], want: dict[str, Any],
                                        version: str) -> None:
    for namespace in ("ops", None):
        policy = build_networkpolicy(broker(spec), namespace)
        kubernetes_validate.validate(policy, version, strict=True)


@pytest.mark.parametrize(("spec", "want"), CASES.values(), ids=CASES.keys())
def test_spec_is_valid_for_the_crd(spec: dict[str, Any], want: dict[str, Any]) -> None:
    validate({"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
              "metadata": {"name": "events"}, "spec": spec}, crd_schema("Broker"))


def test_crd_refuses_a_bad_selector() -> None:
    from jsonschema import ValidationError

    with pytest.raises(ValidationError):
        validate({"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker",
                  "metadata": {"name": "events"},
                  "spec": {"networkPolicy": {"clientNamespaces": {"matchExpressions": [
                      {"key": "team", "operator": "Equals"}]}}}}, crd_schema("Broker"))
