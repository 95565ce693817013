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
    PLAIN,
    ExportConnection,
    ExportSpec,
    ExportTls,
    build_export_cronjob,
    build_scheduled_spark_application,
    export_connection,
    status_from_jobs,
    status_from_scheduled_app,
)
from streamlet_operator.model import BrokerModel
from tests.chart.pod_security import pod_templates, violations

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


# --- over TLS ----------------------------------------------------------------------------------

def _broker(spec_port: int | None = None, **tls: Any) -> BrokerModel:
    spec: dict[str, Any] = {"port": spec_port} if spec_port else {}
    if tls:
        spec["tls"] = {"secretName": "main-tls", **tls}
    return BrokerModel.from_body({"metadata": {"name": "main", "namespace": "shop"},
                                  "spec": spec})


EXPORT = ExportSpec("@hourly", "/x")
OWN_CERT = ExportSpec("@hourly", "/x", tls_client_secret="orders-export-client")


@pytest.mark.parametrize(("export", "broker", "ca_known", "expected"), [
    # no Broker (yet), no TLS: plaintext, on spec.port (not 5552 whatever it says)
    (EXPORT, None, False, PLAIN),
    (EXPORT, _broker(), False, PLAIN),
    (EXPORT, _broker(6000), False, ExportConnection(6000)),
    # the plain listener on and no CA known: plaintext, as the operator itself
    (EXPORT, _broker(6000, port=6551), False, ExportConnection(6000)),
    # a CA known: TLS on the TLS port, trusting the CA source's ca.crt
    (EXPORT, _broker(verifyPeer=False), True, ExportConnection(5551, ExportTls("main-tls"))),
    (EXPORT, _broker(port=6551, caSecretName="main-ca"), True,
     ExportConnection(6551, ExportTls("main-ca"))),
    # TLS only without a CA: TLS all the same, with the system's CAs
    (EXPORT, _broker(plainListener=False), False, ExportConnection(5551, ExportTls())),
    # mutual TLS: the export's own client certificate (never operatorClientSecret)
    (OWN_CERT, _broker(verifyPeer=True, operatorClientSecret="op"), True,
     ExportConnection(5551, ExportTls("main-tls", "orders-export-client"))),
    (EXPORT, _broker(verifyPeer=True, operatorClientSecret="op"), True,
     "requires client certificates .*spec.export.tlsClientSecret"),
    # a client certificate without verifyPeer is offered anyway (harmless; EXTERNAL could use it)
    (OWN_CERT, _broker(plainListener=False), True,
     ExportConnection(5551, ExportTls("main-tls", "orders-export-client"))),
    (OWN_CERT, _broker(verifyPeer=False), False, PLAIN),
])
def test_export_connection(export: ExportSpec, broker: BrokerModel | None, ca_known: bool,
                           expected: ExportConnection | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            export_connection(export, broker, ca_known)
    else:
        assert export_connection(export, broker, ca_known) == expected


def test_tlsclientsecret_is_read_from_the_stream() -> None:
    body = with_spec(export={**STREAM["spec"]["export"], "tlsClientSecret": "mine"})
    spec = ExportSpec.from_stream(body)
    assert spec is not None and spec.tls_client_secret == "mine"


MTLS = ExportConnection(5551, ExportTls("main-tls", "orders-export-client"))
SYSTEM_CAS = ExportConnection(5551, ExportTls())
TLS_KEYS = {"STREAMLET_TLS_CA": ("main-tls", "ca.crt"),
            "STREAMLET_TLS_CERT": ("orders-export-client", "tls.crt"),
            "STREAMLET_TLS_KEY": ("orders-export-client", "tls.key")}


def _secret_refs(obj: Any) -> list[tuple[str, str]]:
    """Every (Secret, key) a rendered object hands a pod: env secretKeyRefs, and spark-submit's
    ``spark.kubernetes.*.secretKeyRef.*`` confs."""
    found: list[tuple[str, str]] = []
    if isinstance(obj, dict):
        ref = obj.get("secretKeyRef")
        if isinstance(ref, dict):
            found.append((ref["name"], ref["key"]))
        for value in obj.values():
            found += _secret_refs(value)
    elif isinstance(obj, list):
        for value in obj:
            found += _secret_refs(value)
    elif isinstance(obj, str) and ".secretKeyRef." in obj:
        secret, key = obj.split("=", 1)[1].split(":")
        found.append((secret, key))
    return found


def _mounted_secrets(obj: Any) -> list[Any]:
    """Volumes and secret mounts anywhere in a rendered object (spark.kubernetes.*.secrets.*
    confs, the Spark operator's secrets fields, pod volumes)."""
    text = json.dumps(obj)
    return [k for k in ("volumes", "volumeMounts", '"secrets"', ".secrets.") if k in text]


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_cronjob_over_mutual_tls(version: str) -> None:
    cronjob = build_export_cronjob(STREAM, MTLS)
    assert cronjob is not None
    kubernetes_validate.validate(cronjob, version, strict=True)
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    cmd = pod["containers"][0]["command"]
    assert cmd[cmd.index("--port") + 1] == "5551" and "--tls" in cmd
    for name, (secret, key) in TLS_KEYS.items():
        assert f"spark.kubernetes.driver.secretKeyRef.{name}={secret}:{key}" in cmd
    # the spark-submit pod launches the driver only: no TLS key in its own environment
    assert {e["name"] for e in pod["containers"][0]["env"]} == {"STREAMLET_USER",
                                                                 "STREAMLET_PASSWORD"}
    [(meta, spec)] = pod_templates(cronjob)
    assert violations(spec, meta) == []


def test_spark_application_over_mutual_tls() -> None:
    app = build_scheduled_spark_application(STREAM, MTLS)
    assert app is not None
    jsonschema.validate(app, SSA_SCHEMA)
    template = app["spec"]["template"]
    assert template["arguments"][template["arguments"].index("--port") + 1] == "5551"
    assert "--tls" in template["arguments"]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in template["driver"]["env"]}
    assert {n: (r["name"], r["key"]) for n, r in env.items() if "TLS" in n} == TLS_KEYS
    assert "env" not in template["executor"]  # the executors get it with the source's options


def test_system_cas_hand_over_no_ca() -> None:
    cronjob = build_export_cronjob(STREAM, SYSTEM_CAS)
    app = build_scheduled_spark_application(STREAM, SYSTEM_CAS)
    assert cronjob is not None and app is not None
    assert "--tls" in app["spec"]["template"]["arguments"]
    assert not [r for r in _secret_refs([cronjob, app]) if r[1] != "user" and r[1] != "password"]


@pytest.mark.parametrize("build", [build_export_cronjob, build_scheduled_spark_application])
def test_the_brokers_private_key_never_reaches_an_export(build: Any) -> None:
    """The CA may be the brokers' own TLS Secret (cert-manager's ca.crt): only that key is
    handed over, never the Secret mounted whole (its tls.key is the brokers' private key)."""
    obj = build(STREAM, MTLS)
    refs = _secret_refs(obj)
    assert ("main-tls", "ca.crt") in refs
    assert [key for secret, key in refs if secret == "main-tls"] == ["ca.crt"] * refs.count(
        ("main-tls", "ca.crt"))
    assert _mounted_secrets(obj) == []  # keys one by one, no Secret volume at all
    # and the check sees a mount: a Secret volume, or spark-submit's secrets conf
    assert _mounted_secrets({"volumes": [{"secret": {"secretName": "main-tls"}}]})
    assert _mounted_secrets(["spark.kubernetes.driver.secrets.main-tls=/etc/tls"])
    assert ("main-tls", "tls.key") in _secret_refs(
        ["spark.kubernetes.driver.secretKeyRef.K=main-tls:tls.key"])
