"""Stream.spec.export as a CronJob (kubernetes-validate, strict) and as a
ScheduledSparkApplication (a schema written from the Spark operator's API reference)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from streamlet_operator.builders.export import (
    build_export_cronjob,
    build_scheduled_spark_application,
    status_from_jobs,
    status_from_scheduled_app,
)

ROOT = Path(__file__).resolve().parents[2]
SSA_SCHEMA = json.loads(
    (ROOT / "spark-on-k8s" / "manifests" / "scheduledsparkapplication.schema.json").read_text())
KUBE_VERSIONS = ("1.28", "1.30", "1.33")

STREAM: dict[str, Any] = {
    "apiVersion": "streamlet.dev/v1alpha1",
    "kind": "Stream",
    "metadata": {"name": "orders", "namespace": "shop", "uid": "1234-abcd"},
    "spec": {"broker": "main", "export": {
        "schedule": "*/15 * * * *", "destination": "s3a://lake/orders", "format": "parquet",
        "image": "registry.example/streamlet-spark:0.1.0"}},
}


def with_spec(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(STREAM)
    body["spec"].update(changes)
    return body


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("partitions", [1, 3])
def test_cronjob_is_valid(version: str, partitions: int) -> None:
    cronjob = build_export_cronjob(with_spec(partitions=partitions))
    assert cronjob is not None
    kubernetes_validate.validate(cronjob, version, strict=True)


def test_cronjob_runs_spark_submit_in_cluster_mode() -> None:
    cronjob = build_export_cronjob(STREAM)
    assert cronjob is not None
    assert cronjob["spec"]["schedule"] == "*/15 * * * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["metadata"]["ownerReferences"][0]["uid"] == "1234-abcd"
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    cmd = container["command"]
    assert cmd[0].endswith("spark-submit")
    assert cmd[cmd.index("--deploy-mode") + 1] == "cluster"
    assert cmd[cmd.index("--master") + 1].startswith("k8s://")
    assert "spark.kubernetes.container.image=registry.example/streamlet-spark:0.1.0" in cmd
    assert "spark.kubernetes.namespace=shop" in cmd
    assert cmd[cmd.index("--stream") + 1] == "orders"
    assert cmd[cmd.index("--destination") + 1] == "s3a://lake/orders"
    assert cmd[cmd.index("--host") + 1] == "main.shop.svc"
    assert cmd[cmd.index("--reference") + 1] == "export-orders"
    secret = {e["name"]: e for e in container["env"]}["STREAMLET_PASSWORD"]
    # the export's own read-only user, never the operator's (tests/chart/test_security.py)
    assert secret["valueFrom"]["secretKeyRef"] == {"name": "orders-export-user", "key": "password"}


def test_super_stream_export() -> None:
    cronjob = build_export_cronjob(with_spec(partitions=3))
    assert cronjob is not None
    cmd = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--super-stream") + 1] == "orders" and "--stream" not in cmd


@pytest.mark.parametrize("partitions", [1, 3])
def test_scheduled_spark_application_is_valid(partitions: int) -> None:
    app = build_scheduled_spark_application(with_spec(partitions=partitions))
    assert app is not None
    jsonschema.validate(app, SSA_SCHEMA)
    assert app["spec"]["template"]["mode"] == "cluster"
    assert app["spec"]["template"]["arguments"][-1] == "export-orders"


def test_schema_catches_mistakes() -> None:
    app = build_scheduled_spark_application(STREAM)
    assert app is not None
    bad = copy.deepcopy(app)
    bad["spec"]["template"]["mode"] = "local"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SSA_SCHEMA)
    bad = copy.deepcopy(app)
    bad["spec"]["template"]["driver"]["memroy"] = "1g"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SSA_SCHEMA)
    cronjob = build_export_cronjob(STREAM)
    assert cronjob is not None
    cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = 3
    with pytest.raises(Exception):  # noqa: B017 - any validation error
        kubernetes_validate.validate(cronjob, KUBE_VERSIONS[-1], strict=True)


def test_no_export_and_bad_export() -> None:
    body = copy.deepcopy(STREAM)
    del body["spec"]["export"]
    assert build_export_cronjob(body) is None and build_scheduled_spark_application(body) is None
    with pytest.raises(ValueError):
        build_export_cronjob(with_spec(export={"schedule": "@daily"}))
    with pytest.raises(ValueError):
        build_export_cronjob(with_spec(export={"schedule": "@daily", "destination": "/x",
                                               "format": "csv"}))


def test_last_run_outcome_for_status() -> None:
    def job(name: str, kind: str, when: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": when, "message": kind}]}}
    jobs = [job("a", "Complete", "2026-01-01T00:00:00Z"), job("b", "Failed", "2026-01-01T01:00:00Z"),
            {"metadata": {"name": "c"}, "status": {"active": 1}}]
    assert status_from_jobs(jobs) == {"lastRun": "b", "lastRunTime": "2026-01-01T01:00:00Z",
                                      "outcome": "Failed", "message": "Failed"}
    assert status_from_jobs([]) is None
    app = {"status": {"lastRunName": "orders-export-1", "lastRun": "2026-01-01T00:00:00Z",
                      "pastSuccessfulRunNames": ["orders-export-1"]}}
    assert status_from_scheduled_app(app)["outcome"] == "Succeeded"  # type: ignore[index]
    assert status_from_scheduled_app({}) is None


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_spark_rbac_manifest_is_valid(version: str) -> None:
    import yaml

    docs = list(yaml.safe_load_all((ROOT / "spark-on-k8s" / "manifests" / "rbac.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding"]
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
