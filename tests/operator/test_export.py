"""Stream.spec.export with the real operator: the CronJob (or, with the Spark operator's CRD,
the ScheduledSparkApplication) it keeps, its removal, refusals, and the last run in the status.

No broker runs here: the export is a schedule on Kubernetes, reconciled whatever the broker's
state. The tests play the CronJob controller and the Spark operator by writing the Jobs and
the ScheduledSparkApplication's status themselves.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from streamlet_operator.builders.export import (
    build_export_cronjob,
    build_scheduled_spark_application,
)
from streamlet_operator.exports import SPARK_CRD
from streamlet_operator.kube import Kube
from tests.operator.harness import eventually
from tests.operator.test_broker import broker_body, condition
from tests.operator.test_stream import gone, stream_body

EXPORT = {"schedule": "*/15 * * * *", "destination": "s3a://lake/orders", "format": "parquet"}
INSTANCE = "app.kubernetes.io/instance"


async def exists(kube: Kube, kind: str, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = await eventually(lambda: kube.get(kind, namespace, name),
                                              what=f"{kind} {name}")
    return result


async def export_condition(kube: Kube, namespace: str, name: str, reason: str,
                           status: str) -> dict[str, Any]:
    async def check() -> Any:
        s = await kube.get("Stream", namespace, name)
        cond = condition(s, "ExportReady")
        return s if (cond.get("status"), cond.get("reason")) == (status, reason) else None

    result: dict[str, Any] = await eventually(check, what=f"ExportReady={status} {reason}")
    return result


async def export_status(kube: Kube, namespace: str, name: str,
                        wanted: dict[str, Any]) -> None:
    async def check() -> Any:
        s = await kube.get("Stream", namespace, name)
        return ((s or {}).get("status") or {}).get("export") == wanted

    await eventually(check, what=f"status.export == {wanted}")


async def finished_job(kube: Kube, namespace: str, name: str, instance: str, type_: str,
                       when: str, message: str = "") -> None:
    """A Job as the CronJob controller leaves it: labelled from the template, then finished."""
    await kube.create({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": name, "namespace": namespace,
                                    "labels": {INSTANCE: instance}},
                       "spec": {"template": {"spec": {"containers": []}}}})
    cond = {"type": type_, "status": "True", "lastTransitionTime": when, "message": message}
    await kube.patch("Job", namespace, name, {"status": {"conditions": [cond]}},
                     subresource="status")


@contextlib.asynccontextmanager
async def spark_operator_installed(kube: Kube) -> AsyncIterator[None]:
    """The Spark operator's CRD, for the test's duration (the cluster is shared)."""
    await kube.create({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": SPARK_CRD},
        "spec": {"group": "sparkoperator.k8s.io", "scope": "Namespaced",
                 "names": {"kind": "ScheduledSparkApplication",
                           "plural": "scheduledsparkapplications",
                           "singular": "scheduledsparkapplication"},
                 "versions": [{"name": "v1beta2", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    try:
        yield
    finally:
        await kube.delete("CustomResourceDefinition", "", SPARK_CRD)


async def test_export_makes_a_cronjob_and_removing_it_deletes_it(kube: Kube,
                                                                 namespace: str) -> None:
    await kube.create(stream_body(namespace, "orders", export=EXPORT))
    cronjob = await exists(kube, "CronJob", namespace, "orders-export")
    stream = await export_condition(kube, namespace, "orders", "CronJobScheduled", "True")
    assert cronjob["spec"] == build_export_cronjob(stream)["spec"]  # type: ignore[index]
    owner = cronjob["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Stream", stream["metadata"]["uid"])
    assert cronjob["metadata"]["labels"][INSTANCE] == "orders-export"
    assert "export" not in stream["status"]  # no run yet

    # A changed schedule reaches the CronJob.
    await kube.patch("Stream", namespace, "orders", {"spec": {"export": {"schedule": "0 * * * *"}}})

    async def rescheduled() -> bool:
        cj = await kube.get("CronJob", namespace, "orders-export")
        return (cj or {}).get("spec", {}).get("schedule") == "0 * * * *"

    await eventually(rescheduled, what="the CronJob's new schedule")

    await kube.patch("Stream", namespace, "orders", {"spec": {"export": None}})
    await gone(kube, "CronJob", namespace, "orders-export")

    async def condition_dropped() -> bool:
        return condition(await kube.get("Stream", namespace, "orders"), "ExportReady") == {}

    await eventually(condition_dropped, what="ExportReady dropped")


async def test_invalid_export_is_a_condition_and_a_warning(kube: Kube, namespace: str) -> None:
    await kube.create(stream_body(namespace, "orders", export={**EXPORT, "format": "csv"}))
    stream = await export_condition(kube, namespace, "orders", "ExportInvalid", "False")
    assert "'csv' is not supported" in condition(stream, "ExportReady")["message"]
    assert await kube.get("CronJob", namespace, "orders-export") is None

    async def warned() -> Any:
        return [e for e in await kube.list("Event", namespace)
                if e.get("reason") == "ExportInvalid" and e.get("type") == "Warning"]

    events = await eventually(warned, what="an ExportInvalid Warning event")
    assert "csv" in events[0]["message"]

    # Fixed: the schedule is made, the condition turns True.
    await kube.patch("Stream", namespace, "orders", {"spec": {"export": {"format": "parquet"}}})
    await export_condition(kube, namespace, "orders", "CronJobScheduled", "True")
    await exists(kube, "CronJob", namespace, "orders-export")


async def test_export_to_a_mutual_tls_only_broker(kube: Kube, namespace: str) -> None:
    """The export follows its Broker: TLS only with verifyPeer needs the export's own client
    certificate (an ExportInvalid until it has one), then runs over TLS on the TLS port with
    the CA source's ca.crt. The Broker's CA is cert-manager's: ca.crt in the TLS Secret."""
    await kube.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                       "metadata": {"name": "b-tls", "namespace": namespace},
                       "data": {"tls.crt": "eA==", "tls.key": "eA==", "ca.crt": "eA=="}})
    await kube.create(broker_body(namespace, port=6000, tls={
        "secretName": "b-tls", "port": 6001, "verifyPeer": True, "plainListener": False,
        "operatorClientSecret": "b-operator"}))
    await kube.create(stream_body(namespace, "orders", export=EXPORT))
    stream = await export_condition(kube, namespace, "orders", "ExportInvalid", "False")
    assert "spec.export.tlsClientSecret" in condition(stream, "ExportReady")["message"]

    await kube.patch("Stream", namespace, "orders",
                     {"spec": {"export": {"tlsClientSecret": "orders-export-client"}}})
    await export_condition(kube, namespace, "orders", "CronJobScheduled", "True")
    cronjob = await exists(kube, "CronJob", namespace, "orders-export")
    cmd = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--port") + 1] == "6001" and "--tls" in cmd
    assert "spark.kubernetes.driver.secretKeyRef.STREAMLET_TLS_CA=b-tls:ca.crt" in cmd
    assert ("spark.kubernetes.driver.secretKeyRef.STREAMLET_TLS_KEY=orders-export-client:tls.key"
            in cmd)


async def test_job_outcomes_reach_the_status(kube: Kube, namespace: str) -> None:
    await kube.create(stream_body(namespace, "orders", export=EXPORT))
    await exists(kube, "CronJob", namespace, "orders-export")

    await finished_job(kube, namespace, "orders-export-100", "orders-export", "Complete",
                       "2026-11-21T10:00:00Z")
    # Another stream's export, finished later: not this Stream's run.
    await finished_job(kube, namespace, "other-export-1", "other-export", "Failed",
                       "2026-11-21T12:00:00Z", "BackoffLimitExceeded")
    await export_status(kube, namespace, "orders", {
        "lastRun": "orders-export-100", "lastRunTime": "2026-11-21T10:00:00Z",
        "outcome": "Succeeded", "message": ""})

    await finished_job(kube, namespace, "orders-export-200", "orders-export", "Failed",
                       "2026-11-21T11:00:00Z", "Job has reached the specified backoff limit")
    await export_status(kube, namespace, "orders", {
        "lastRun": "orders-export-200", "lastRunTime": "2026-11-21T11:00:00Z",
        "outcome": "Failed", "message": "Job has reached the specified backoff limit"})

    # No export any more: its status goes with it.
    await kube.patch("Stream", namespace, "orders", {"spec": {"export": None}})
    await export_status(kube, namespace, "orders", None)  # type: ignore[arg-type]


async def test_with_the_spark_operator_a_scheduled_spark_application_replaces_the_cronjob(
        kube: Kube, namespace: str) -> None:
    await kube.create(stream_body(namespace, "orders", export=EXPORT))
    await exists(kube, "CronJob", namespace, "orders-export")
    async with spark_operator_installed(kube):
        app = await exists(kube, "ScheduledSparkApplication", namespace, "orders-export")
        stream = await export_condition(kube, namespace, "orders", "SparkApplicationScheduled",
                                        "True")
        assert app["spec"] == build_scheduled_spark_application(stream)["spec"]  # type: ignore[index]
        assert app["metadata"]["ownerReferences"][0]["uid"] == stream["metadata"]["uid"]
        await gone(kube, "CronJob", namespace, "orders-export")  # one schedule, not two

        # The Spark operator reports a run.
        await kube.patch("ScheduledSparkApplication", namespace, "orders-export", {"status": {
            "lastRun": "2026-11-21T10:15:00Z", "lastRunName": "orders-export-1763720100",
            "pastSuccessfulRunNames": ["orders-export-1763720100"], "scheduleState": "Scheduled"}},
            subresource="status")
        await export_status(kube, namespace, "orders", {
            "lastRun": "orders-export-1763720100", "lastRunTime": "2026-11-21T10:15:00Z",
            "outcome": "Succeeded", "message": ""})

        await kube.patch("Stream", namespace, "orders", {"spec": {"export": None}})
        await gone(kube, "ScheduledSparkApplication", namespace, "orders-export")
