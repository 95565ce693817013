"""A Stream's ``spec.export`` as Kubernetes objects: a CronJob running spark-submit in cluster
mode, or a ScheduledSparkApplication when the Spark operator's CRD is installed.

Pure functions of the Stream resource (no API calls), so handlers decide what to apply and
tests validate the output against the schemas. The export itself is
spark-on-k8s/jobs/export_parquet.py: its progress is a stored offset (consumer reference
``export-<resource>``) in the stream, so every run exports only what is new."""

from __future__ import annotations

import base64
import copy
import re
from dataclasses import dataclass
from typing import Any

from .. import names
from ..constants import API_VERSION
from ..model import DEFAULT_PORT, BrokerModel, Permission, StreamModel

SPARK_OPERATOR_API = "sparkoperator.k8s.io/v1beta2"
DEFAULT_IMAGE = "ghcr.io/streamlet/spark:0.1.0"
SERVICE_ACCOUNT = "streamlet-spark"
MASTER = "k8s://https://kubernetes.default.svc:443"
JOB_FILE = "local:///opt/streamlet/jobs/export_parquet.py"
SPARK_SUBMIT = "/opt/spark/bin/spark-submit"
SPARK_VERSION = "4.3.0"  # the PySpark the image installs (the data source needs >= 4.2)
FORMATS = ("parquet",)
#: The "restricted" Pod Security Standard for every pod of an export: spark-submit's, the
#: driver's and the executors' (the image's user is spark, uid 185: spark-on-k8s/Dockerfile).
#: spark-on-k8s/pod-templates/ carries the same for spark-submit, baked into the image here:
POD_TEMPLATES = "/opt/streamlet/pod-templates"
POD_SECURITY_CONTEXT: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": 185,
                                        "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {"allowPrivilegeEscalation": False,
                                              "capabilities": {"drop": ["ALL"]}}


@dataclass(frozen=True)
class ExportSpec:
    schedule: str
    destination: str
    format: str = "parquet"
    image: str = DEFAULT_IMAGE
    #: a kubernetes.io/tls Secret: the client certificate the export presents to a Broker
    #: with spec.tls.verifyPeer (its own: the operator's would let an export pod be the operator)
    tls_client_secret: str | None = None

    @classmethod
    def from_stream(cls, body: dict[str, Any],
                    default_image: str = DEFAULT_IMAGE) -> ExportSpec | None:
        """``spec.export`` checked, or None when the Stream has no export; ``default_image``
        when it names no image (the operator's setting, settings.Settings.spark_image)."""
        export = (body.get("spec") or {}).get("export")
        if not export:
            return None
        schedule, destination = export.get("schedule"), export.get("destination")
        if not schedule or not destination:
            raise ValueError("spec.export needs a schedule and a destination")
        fmt = (export.get("format") or "parquet").lower()
        if fmt not in FORMATS:
            raise ValueError(f"spec.export.format {fmt!r} is not supported ({', '.join(FORMATS)})")
        return cls(schedule, destination, fmt, export.get("image") or default_image,
                   export.get("tlsClientSecret") or None)


@dataclass(frozen=True)
class ExportTls:
    """What an export's driver needs for TLS, as Secret keys handed over one by one in its
    environment (as the password is): ``ca.crt`` of ``ca_secret`` (None: the system's CAs),
    ``tls.crt``/``tls.key`` of ``client_secret`` (None: no client certificate). Never a
    whole Secret mounted: the CA's may be the brokers' own TLS Secret, with their key."""

    ca_secret: str | None = None
    client_secret: str | None = None


@dataclass(frozen=True)
class ExportConnection:
    """Where the export job connects: the plain port, or the TLS port with ``tls``."""

    port: int = DEFAULT_PORT
    tls: ExportTls | None = None


#: Plaintext to the default port: a Broker without TLS on spec.port 5552.
PLAIN = ExportConnection()


def export_connection(export: ExportSpec, broker: BrokerModel | None,
                      ca_known: bool) -> ExportConnection:
    """The export's connection to ``broker`` (None: not found yet, the default port),
    ``ca_known`` telling whether the CA source Secret has a ``ca.crt``. The operator's rule
    (model.Tls.clients_use_tls): TLS on the TLS port unless the plain listener is on and no CA
    is known. Raises ValueError when the broker requires a client certificate the export lacks."""
    if broker is None:
        return PLAIN
    tls = broker.tls
    if tls is None or not tls.clients_use_tls(ca_known):
        return ExportConnection(broker.port)
    if tls.verify_peer and export.tls_client_secret is None:
        raise ValueError(f"Broker {broker.name} requires client certificates (spec.tls."
                         f"verifyPeer): set spec.export.tlsClientSecret to a kubernetes.io/tls "
                         f"Secret with the export's")
    return ExportConnection(tls.port, ExportTls(tls.ca_source if ca_known else None,
                                                export.tls_client_secret))


def export_name(stream: StreamModel) -> str:
    return f"{stream.name}-export"


def export_reference(stream: StreamModel) -> str:
    """The consumer reference holding the export's progress in the stream."""
    return f"export-{stream.name}"


def export_user(stream: StreamModel) -> str:
    """The broker user an export runs as: its own, not the operator's (read-only)."""
    return f"streamlet-export-{stream.name}"


def export_secret_name(stream: StreamModel) -> str:
    """The Secret holding the export user's name and password (keys ``user``, ``password``)."""
    return f"{export_name(stream)}-user"


#: The labels that find a Broker's export user Secrets (handlers/broker.py adds those users).
EXPORT_USER_COMPONENT = "export-user"
BROKER_LABEL = "streamlet.dev/broker"


def export_permission(stream: StreamModel) -> Permission:
    """Read the stream (its partitions) and nothing else: configure and write match no name,
    read only these names, whole and regex-escaped (RabbitMQ's patterns search, so anchored)."""
    alternatives = "|".join(re.escape(n) for n in dict.fromkeys([stream.stream,
                                                                   *stream.partition_names]))
    return Permission(export_user(stream), "/", configure="", write="",
                      read=f"^(?:{alternatives})$")


def build_export_user_secret(body: dict[str, Any], password: str) -> dict[str, Any]:
    """The export user's Secret, owned by the Stream (deleting it removes the user)."""
    stream = StreamModel.from_body(body)
    meta = _metadata(body, stream)
    meta["name"] = export_secret_name(stream)
    meta["labels"] = {**labels(stream), "app.kubernetes.io/component": EXPORT_USER_COMPONENT,
                      BROKER_LABEL: stream.broker}
    data = {"user": export_user(stream), "password": password}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta,
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def labels(stream: StreamModel) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "streamlet-export",
        "app.kubernetes.io/instance": export_name(stream),
        "app.kubernetes.io/component": "export",
        "app.kubernetes.io/part-of": "streamlet",
        "app.kubernetes.io/managed-by": "streamlet-operator",
        "streamlet.dev/stream": stream.name,
    }


def _metadata(body: dict[str, Any], stream: StreamModel) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": export_name(stream), "namespace": stream.namespace,
                            "labels": labels(stream)}
    uid = (body.get("metadata") or {}).get("uid")
    if uid:  # the Stream owns its export: deleting it removes the schedule
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": "Stream",
                                    "name": stream.name, "uid": uid, "controller": True,
                                    "blockOwnerDeletion": True}]
    return meta


def job_arguments(stream: StreamModel, export: ExportSpec,
                  connection: ExportConnection = PLAIN) -> list[str]:
    """The export job's own arguments (after the application file)."""
    host = f"{names.client_service(stream.broker)}.{stream.namespace}.svc"
    target = (["--super-stream", stream.stream] if stream.partitions > 1
              else ["--stream", stream.stream])
    tls = ["--tls"] if connection.tls is not None else []
    return ["--host", host, "--port", str(connection.port), *tls, *target,
            "--destination", export.destination, "--reference", export_reference(stream)]


def driver_secret_keys(stream: StreamModel, connection: ExportConnection
                       ) -> dict[str, tuple[str, str]]:
    """The driver's environment from Secrets: variable -> (Secret, key). The job reads the
    TLS ones as PEM text (spark-on-k8s/jobs/export_parquet.py); the executors get it from the
    driver with the data source's options, as they get the password."""
    secret = export_secret_name(stream)
    keys = {"STREAMLET_USER": (secret, "user"), "STREAMLET_PASSWORD": (secret, "password")}
    tls = connection.tls
    if tls is not None and tls.ca_secret is not None:
        keys["STREAMLET_TLS_CA"] = (tls.ca_secret, "ca.crt")
    if tls is not None and tls.client_secret is not None:
        keys["STREAMLET_TLS_CERT"] = (tls.client_secret, "tls.crt")
        keys["STREAMLET_TLS_KEY"] = (tls.client_secret, "tls.key")
    return keys


def _secret_env(keys: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for name, (secret, key) in keys.items()]


def _credentials_env(stream: StreamModel) -> list[dict[str, Any]]:
    return _secret_env(driver_secret_keys(stream, PLAIN))


def spark_submit_command(stream: StreamModel, export: ExportSpec,
                         connection: ExportConnection = PLAIN,
                         service_account: str = SERVICE_ACCOUNT, master: str = MASTER) -> list[str]:
    """spark-submit in cluster mode: the driver runs in its own pod, which makes executors."""
    conf = {
        "spark.kubernetes.namespace": stream.namespace,
        "spark.kubernetes.container.image": export.image,
        "spark.kubernetes.authenticate.driver.serviceAccountName": service_account,
        **{f"spark.kubernetes.driver.secretKeyRef.{name}": f"{secret}:{key}"
           for name, (secret, key) in driver_secret_keys(stream, connection).items()},
        "spark.kubernetes.driver.label.streamlet.dev/stream": stream.name,
        "spark.kubernetes.submission.waitAppCompletion": "true",
        # the driver's and executors' security contexts (Spark sets none of its own)
        "spark.kubernetes.driver.podTemplateFile": f"{POD_TEMPLATES}/driver.yaml",
        "spark.kubernetes.driver.podTemplateContainerName": "spark-kubernetes-driver",
        "spark.kubernetes.executor.podTemplateFile": f"{POD_TEMPLATES}/executor.yaml",
        "spark.kubernetes.executor.podTemplateContainerName": "spark-kubernetes-executor",
        "spark.executor.instances": "1",
    }
    args = [SPARK_SUBMIT, "--master", master, "--deploy-mode", "cluster",
            "--name", export_name(stream)]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return [*args, JOB_FILE, *job_arguments(stream, export, connection)]


def build_export_cronjob(body: dict[str, Any],
                         connection: ExportConnection = PLAIN,
                         service_account: str = SERVICE_ACCOUNT,
                         default_image: str = DEFAULT_IMAGE) -> dict[str, Any] | None:
    """The CronJob for the Stream resource ``body``, or None without ``spec.export``. The
    spark-submit pod only launches the driver: the TLS keys go to the driver, not to it."""
    export = ExportSpec.from_stream(body, default_image)
    if export is None:
        return None
    stream = StreamModel.from_body(body)
    pod = {
        "metadata": {"labels": labels(stream)},
        "spec": {
            "serviceAccountName": service_account,
            "restartPolicy": "Never",
            "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
            "containers": [{
                "name": "spark-submit",
                "image": export.image,
                "command": spark_submit_command(stream, export, connection, service_account),
                "env": _credentials_env(stream),
                "resources": {"requests": {"cpu": "100m", "memory": "512Mi"},
                              "limits": {"memory": "1Gi"}},
                "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
            }],
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _metadata(body, stream),
        "spec": {
            "schedule": export.schedule,
            "concurrencyPolicy": "Forbid",  # one run at a time: runs share the stored offset
            "startingDeadlineSeconds": 300,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"metadata": {"labels": labels(stream)},
                            "spec": {"backoffLimit": 2, "template": pod}},
        },
    }


def _security_contexts() -> dict[str, Any]:
    """A Spark operator driver's or executor's pod and container security contexts."""
    return {"podSecurityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
            "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT)}


def build_scheduled_spark_application(body: dict[str, Any],
                                      connection: ExportConnection = PLAIN,
                                      service_account: str = SERVICE_ACCOUNT,
                                      default_image: str = DEFAULT_IMAGE
                                      ) -> dict[str, Any] | None:
    """The same schedule as a ScheduledSparkApplication (kubeflow Spark operator)."""
    export = ExportSpec.from_stream(body, default_image)
    if export is None:
        return None
    stream = StreamModel.from_body(body)
    env = _secret_env(driver_secret_keys(stream, connection))
    template = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": export.image,
        "imagePullPolicy": "IfNotPresent",
        "mainApplicationFile": JOB_FILE,
        "arguments": job_arguments(stream, export, connection),
        "sparkVersion": SPARK_VERSION,
        "restartPolicy": {"type": "Never"},
        "driver": {"cores": 1, "memory": "1g", "serviceAccount": service_account,
                   "labels": labels(stream), "env": env, **_security_contexts()},
        "executor": {"cores": 1, "instances": 1, "memory": "1g", "labels": labels(stream),
                     **_security_contexts()},
    }
    return {
        "apiVersion": SPARK_OPERATOR_API,
        "kind": "ScheduledSparkApplication",
        "metadata": _metadata(body, stream),
        "spec": {
            "schedule": export.schedule,
            "concurrencyPolicy": "Forbid",
            "successfulRunHistoryLimit": 3,
            "failedRunHistoryLimit": 3,
            "template": template,
        },
    }


# --- the last run's outcome, for the Stream's status -------------------------------------------

def status_from_jobs(jobs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``status.export`` from the CronJob's Jobs: the newest finished one's outcome."""
    finished = []
    for job in jobs:
        st = job.get("status") or {}
        for cond in st.get("conditions") or []:
            if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
                finished.append((cond.get("lastTransitionTime") or "", job, cond))
    if not finished:
        return None
    when, job, cond = max(finished, key=lambda f: f[0])
    return {"lastRun": job["metadata"]["name"], "lastRunTime": when,
            "outcome": "Succeeded" if cond["type"] == "Complete" else "Failed",
            "message": cond.get("message") or cond.get("reason") or ""}


def status_from_scheduled_app(app: dict[str, Any]) -> dict[str, Any] | None:
    """``status.export`` from a ScheduledSparkApplication's status."""
    st = app.get("status") or {}
    name = st.get("lastRunName")
    if not name:
        return None
    if name in (st.get("pastFailedRunNames") or []):
        outcome = "Failed"
    elif name in (st.get("pastSuccessfulRunNames") or []):
        outcome = "Succeeded"
    else:
        outcome = "Running"
    return {"lastRun": name, "lastRunTime": st.get("lastRun", ""), "outcome": outcome,
            "message": st.get("reason") or ""}
