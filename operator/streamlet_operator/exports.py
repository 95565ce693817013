"""A Stream's scheduled export: keep the CronJob (or ScheduledSparkApplication) that
builders/export.py makes, remove it when ``spec.export`` goes, and report the last run.

Each export runs as a user of its own that may only read its stream, kept in a Secret
(``<stream>-export-user``, made here once) that goes with the export or the Stream. Runs at the
end of every Stream reconciliation; the ``ExportReady`` condition records which kind was made, so
a Stream without an export costs no API call. Mechanism: docs/operations.md#export-users.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from .brokers import CA_KEY
from .builders.export import (
    DEFAULT_IMAGE,
    ExportConnection,
    ExportSpec,
    build_export_cronjob,
    build_export_user_secret,
    build_scheduled_spark_application,
    export_connection,
    export_name,
    export_secret_name,
    labels,
    status_from_jobs,
    status_from_scheduled_app,
)
from .conditions import get_condition, remove_condition, set_condition
from .kube import ApiError, Kube
from .model import BrokerModel, StreamModel
from .settings import SETTINGS

CONDITION = "ExportReady"
SPARK_CRD = "scheduledsparkapplications.sparkoperator.k8s.io"
#: The ExportReady reason that says which kind of object holds the schedule.
SCHEDULED = {"CronJob": "CronJobScheduled",
             "ScheduledSparkApplication": "SparkApplicationScheduled"}
INVALID, FAILED = "ExportInvalid", "ExportFailed"
log = logging.getLogger(__name__)


async def spark_operator_installed(kube: Kube) -> bool:
    return await kube.get("CustomResourceDefinition", "", SPARK_CRD) is not None


async def reconcile_export(body: dict[str, Any], kube: Kube, status: dict[str, Any],
                           generation: int) -> list[tuple[str, str]]:
    """Bring the export in line with ``spec.export``; update ``status`` (its ``export`` field
    and the ExportReady condition) in place; return Events to post (reason, message)."""
    conditions = status.get("conditions") or []
    old = get_condition(conditions, CONDITION)
    where = f"{body['metadata'].get('namespace')}/{body['metadata']['name']}"
    if not (body.get("spec") or {}).get("export"):
        if old is not None or status.get("export"):
            try:
                await _remove(kube, body, kinds=("CronJob", "ScheduledSparkApplication"))
                await kube.delete("Secret", body["metadata"].get("namespace") or "default",
                                  export_secret_name(StreamModel.from_body(body)))
            except (ApiError, OSError, TimeoutError) as e:  # the condition stays: retried
                log.warning("%s: export not removed: %s", where, e)
                return _set(status, conditions, old, False, FAILED, f"not removed: {e}",
                            generation, warn=True)
            status["conditions"] = remove_condition(conditions, CONDITION)
        status["export"] = None  # a merge patch with null drops the field
        return []

    try:
        spark = await spark_operator_installed(kube)
        build = build_scheduled_spark_application if spark else build_export_cronjob
        try:
            obj = build(body, await _connection(kube, body),
                        default_image=SETTINGS.spark_image or DEFAULT_IMAGE)
        except ValueError as e:  # the user's spec: say so, leave any running schedule alone
            return _set(status, conditions, old, False, INVALID, str(e), generation, warn=True)
        assert obj is not None
        kind = obj["kind"]
        # The Spark operator came or went: one schedule only, the new kind's.
        others = tuple(k for k, reason in SCHEDULED.items()
                       if k != kind and old is not None and old.get("reason") == reason)
        if others:
            await _remove(kube, body, kinds=others)
        await ensure_export_user(kube, body)
        applied = await kube.apply(obj)
        if spark:
            last = status_from_scheduled_app(applied)
        else:
            stream = StreamModel.from_body(body)
            last = status_from_jobs(await kube.list(
                "Job", stream.namespace,
                labels={"app.kubernetes.io/instance": labels(stream)["app.kubernetes.io/instance"]}))
    except (ApiError, OSError, TimeoutError) as e:  # RBAC, API server: the timer retries
        log.warning("%s: export not reconciled: %s", where, e)
        return _set(status, conditions, old, False, FAILED, str(e), generation, warn=True)
    if last is not None or status.get("export"):
        status["export"] = last
    schedule = obj["spec"]["schedule"]
    return _set(status, conditions, old, True, SCHEDULED[kind],
                f"{kind} {obj['metadata']['name']} on schedule {schedule!r}", generation)


async def _connection(kube: Kube, body: dict[str, Any]) -> ExportConnection:
    """How the export reaches its Broker (builders.export.export_connection): the port, and
    TLS when the Broker has it; a CA is known when its source Secret has ``ca.crt``."""
    export, stream = ExportSpec.from_stream(body), StreamModel.from_body(body)
    assert export is not None
    found = await kube.get("Broker", stream.namespace, stream.broker)
    broker = BrokerModel.from_body(found) if found is not None else None
    ca_known = False
    if broker is not None and broker.tls is not None:
        secret = await kube.get("Secret", stream.namespace, broker.tls.ca_source)
        ca_known = bool(((secret or {}).get("data") or {}).get(CA_KEY))
    return export_connection(export, broker, ca_known)


async def ensure_export_user(kube: Kube, body: dict[str, Any]) -> None:
    """The export user's Secret, made once with a random password (kept afterwards: the
    broker's users file has it, and a running export job uses it)."""
    stream = StreamModel.from_body(body)
    if await kube.get("Secret", stream.namespace, export_secret_name(stream)) is not None:
        return
    try:
        await kube.create(build_export_user_secret(body, secrets.token_urlsafe(24)))
    except ApiError as e:
        if e.status != 409:  # 409: made meanwhile by another pass, which is as good
            raise


def _set(status: dict[str, Any], conditions: list[dict[str, Any]], old: dict[str, Any] | None,
         ok: bool, reason: str, message: str, generation: int,
         warn: bool = False) -> list[tuple[str, str]]:
    status["conditions"] = set_condition(conditions, CONDITION, ok, reason, message, generation)
    changed = old is None or (old.get("reason"), old.get("message")) != (reason, message)
    # Timers run often: an Event only when the outcome changes, not on every pass.
    return [(reason, message)] if changed and (warn or old is None or
                                               old.get("reason") != reason) else []


async def _remove(kube: Kube, body: dict[str, Any], kinds: tuple[str, ...]) -> None:
    stream = StreamModel.from_body(body)
    for kind in kinds:
        if kind == "ScheduledSparkApplication" and not await spark_operator_installed(kube):
            continue  # the kind is not served: there is nothing to delete
        await kube.delete(kind, stream.namespace, export_name(stream))
