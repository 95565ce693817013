"""The CRDs: valid for Kubernetes, structural, defaults that fit, examples that validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml

from streamlet_operator.builders.export import status_from_jobs, status_from_scheduled_app
from streamlet_operator.conditions import set_condition
from streamlet_operator.exports import CONDITION, SCHEDULED
from streamlet_operator.model import BrokerModel, StreamModel
from tests.chart.conftest import CHART, CRDS, EXAMPLES, KUBE_VERSIONS, crd_schema, load_crds
from tests.chart.schema import to_jsonschema, validate


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("kind", ["Broker", "Stream"])
def test_crd_is_valid_for_kubernetes(kind: str, version: str) -> None:
    kubernetes_validate.validate(load_crds()[kind], version, strict=True)


def _walk(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    if node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node:
        return found
    for name, child in (node.get("properties") or {}).items():
        found += _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _walk(node["additionalProperties"], f"{path}{{}}")
    return found


@pytest.mark.parametrize("kind", ["Broker", "Stream"])
def test_schema_is_structural_and_defaults_fit(kind: str) -> None:
    for path, node in _walk(crd_schema(kind), ""):
        if node.get("x-kubernetes-int-or-string"):
            continue
        assert "type" in node, f"{kind}{path} has no type (not a structural schema)"
        if "default" in node:
            jsonschema.validate(node["default"], to_jsonschema(node))


@pytest.mark.parametrize("kind", ["Broker", "Stream"])
def test_printer_columns_point_into_the_schema(kind: str) -> None:
    crd = load_crds()[kind]
    paths = {path for path, _ in _walk(crd_schema(kind), "")}
    for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]:
        json_path = column["jsonPath"].split("[")[0]
        if json_path.startswith(".metadata"):
            continue
        assert json_path in paths, f"{kind} column {column['name']}: {json_path} not in schema"


def test_status_subresource_and_names() -> None:
    for kind, short in (("Broker", "slb"), ("Stream", "sls")):
        crd = load_crds()[kind]
        assert crd["spec"]["group"] == "streamlet.dev"
        assert crd["spec"]["versions"][0]["name"] == "v1alpha1"
        assert crd["spec"]["versions"][0]["subresources"]["status"] == {}
        assert short in crd["spec"]["names"]["shortNames"]
        assert "streamlet" in crd["spec"]["names"]["categories"]


def _examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.name)
def test_examples_validate(path: Path) -> None:
    for obj in yaml.safe_load_all(path.read_text()):
        if obj["apiVersion"].startswith("streamlet.dev/"):
            validate(obj, crd_schema(obj["kind"]))
        elif obj["apiVersion"].startswith("cert-manager.io/"):
            continue  # not Kubernetes' own: tests/chart/test_security.py checks them
        else:
            kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("spec, problem", [
    ({"broker": "b", "partitions": 0}, "partitions"),
    ({"broker": "b", "retention": {"maxAge": "7 days"}}, "maxAge"),
    ({"broker": "b", "deletionPolicy": "Orphan"}, "deletionPolicy"),
    ({"broker": "b", "filterSizeBytes": 8}, "filterSizeBytes"),
    ({"broker": "b", "replicas": 0}, "replicas"),
    ({"broker": "b", "replicas": 8}, "replicas"),
    ({"broker": "b", "replica": 3}, "unexpected"),
    ({"partitions": 2}, "broker"),
    ({"broker": "b", "export": {"schedule": "0 * * * *"}}, "destination"),
])
def test_invalid_streams_are_rejected(spec: dict[str, Any], problem: str) -> None:
    obj = {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Stream",
           "metadata": {"name": "s"}, "spec": spec}
    with pytest.raises(jsonschema.ValidationError) as info:
        validate(obj, crd_schema("Stream"))
    assert problem in str(info.value) or problem == "unexpected"


def test_invalid_broker_is_rejected() -> None:
    obj = {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker", "metadata": {"name": "b"},
           "spec": {"replicas": 0, "storage": {"size": "lots"}}}
    with pytest.raises(jsonschema.ValidationError):
        validate(obj, crd_schema("Broker"))
    obj["spec"] = {"streams": {"defaultReplicas": 8}}
    with pytest.raises(jsonschema.ValidationError, match="8"):
        validate(obj, crd_schema("Broker"))


@pytest.mark.parametrize("spec", [
    {"storage": {"fsync": "always"}},
    {"storage": {"fsync": "Chunk"}},
    {"replication": {"restorePreferredLeader": "yes"}},
    {"logging": {"level": "verbose"}},
    {"logging": {"level": "INFO"}},  # as the Broker's other enums: lower case
    {"logging": {"json": "yes"}},
])
def test_bad_fsync_and_replication_settings_are_rejected(spec: dict[str, Any]) -> None:
    obj = {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker", "metadata": {"name": "b"},
           "spec": spec}
    with pytest.raises(jsonschema.ValidationError):
        validate(obj, crd_schema("Broker"))


@pytest.mark.parametrize("fsync", ["never", "interval", "chunk"])
def test_fsync_and_replication_settings_are_accepted(fsync: str) -> None:
    obj = {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker", "metadata": {"name": "b"},
           "spec": {"storage": {"fsync": fsync},
                    "replication": {"restorePreferredLeader": False}}}
    validate(obj, crd_schema("Broker"))
    broker = BrokerModel.from_body({**obj, "metadata": {"name": "b"}})
    assert broker.fsync == fsync and not broker.restore_preferred_leader
    assert BrokerModel.from_body({"metadata": {"name": "b"}, "spec": {}}).restore_preferred_leader


@pytest.mark.parametrize(("logging", "level", "json"), [
    (None, None, False),
    ({}, None, False),
    ({"level": "debug"}, "debug", False),
    ({"level": "error", "json": True}, "error", True),
    ({"json": False}, None, False),
])
def test_logging_settings_are_accepted(logging: dict[str, Any] | None, level: str | None,
                                       json: bool) -> None:
    obj = {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Broker", "metadata": {"name": "b"},
           "spec": {} if logging is None else {"logging": logging}}
    validate(obj, crd_schema("Broker"))
    broker = BrokerModel.from_body(obj)
    assert (broker.log_level, broker.log_json) == (level, json)


def test_the_preferred_leader_fits_the_stream_status() -> None:
    status = {"replication": {"epoch": 2, "leader": 1, "members": [0, 1, 2], "inSync": [0, 1],
                              "phase": "Ready", "reason": "Elected", "preferredLeader": 0},
              "partitionReplication": {"s-0": {"epoch": 1, "leader": 2, "members": [0, 1, 2],
                                               "preferredLeader": 2}}}
    validate({"apiVersion": "streamlet.dev/v1alpha1", "kind": "Stream", "metadata": {"name": "s"},
              "spec": {"broker": "b"}, "status": status}, crd_schema("Stream"))


def test_chart_carries_the_same_crds() -> None:
    chart = helm_python.Chart.load(CHART)
    try:
        loaded = {Path(c["filename"]).name: c["data"] for c in chart.crds}
    finally:
        chart.close()
    files = {p.name: p.read_bytes() for p in CRDS.glob("*.yaml")}
    # and kopf's peering CRDs, the chart's own (its operator replicas' leader election)
    assert set(loaded) == set(files) | {"kopf.dev_peerings.yaml"}
    for name, data in loaded.items():
        if name == "kopf.dev_peerings.yaml":
            continue
        raw = data.encode() if isinstance(data, str) else bytes(data)
        assert raw == files[name], f"charts/streamlet/crds/{name} differs from crds/{name}"


def _defaults(node: dict[str, Any], value: Any) -> Any:
    """Apply a schema's defaults to a value, as the API server does."""
    if value is None and "default" in node:
        value = node["default"]
    if isinstance(value, dict):
        for name, child in (node.get("properties") or {}).items():
            filled = _defaults(child, value.get(name))
            if filled is not None:
                value[name] = filled
    return value


def test_operator_defaults_match_the_crds() -> None:
    """The operator applies the CRDs' defaults itself; both must agree."""
    body = {"metadata": {"name": "b", "namespace": "n"}, "spec": {}}
    defaulted = _defaults(crd_schema("Broker")["properties"]["spec"], {})
    assert BrokerModel.from_body(body) == BrokerModel.from_body({**body, "spec": defaulted})
    stream = {"metadata": {"name": "s", "namespace": "n"}, "spec": {"broker": "b"}}
    filled = _defaults(crd_schema("Stream")["properties"]["spec"], {"broker": "b"})
    assert StreamModel.from_body(stream) == StreamModel.from_body({**stream, "spec": filled})
    assert filled["deletionPolicy"] == "delete" and filled["partitions"] == 1


def test_operator_export_status_fits_the_crd() -> None:
    """What the export reconciler writes is what the CRD's status schema accepts."""
    job = {"metadata": {"name": "s-export-1"}, "status": {"conditions": [
        {"type": "Failed", "status": "True", "lastTransitionTime": "2026-11-21T10:00:00Z",
         "message": "BackoffLimitExceeded"}]}}
    app = {"status": {"lastRunName": "s-export-2", "lastRun": "2026-11-21T10:00:00Z"}}
    for export in (status_from_jobs([job]), status_from_scheduled_app(app)):
        assert export is not None
        conditions = set_condition([], CONDITION, True, SCHEDULED["CronJob"], "CronJob s-export", 1)
        obj = {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Stream", "metadata": {"name": "s"},
               "spec": {"broker": "b"}, "status": {"export": export, "conditions": conditions}}
        validate(obj, crd_schema("Stream"))
