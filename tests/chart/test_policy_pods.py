"""Every pod the project renders meets the "restricted" Pod Security Standard, and names its
image by registry and exact tag: the chart's (rendered by Helm's library, in several value
combinations), the operator's builders' (broker StatefulSet, export CronJob, the Spark
operator's driver and executors) and the Spark pod templates and manifests. First, the checker
itself refuses what it must."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from streamlet_operator.builders import build_all
from streamlet_operator.builders.export import (
    CONTAINER_SECURITY_CONTEXT,
    DEFAULT_IMAGE,
    PLAIN,
    POD_SECURITY_CONTEXT,
    POD_TEMPLATES,
    ExportConnection,
    ExportTls,
    build_export_cronjob,
    build_scheduled_spark_application,
    spark_submit_command,
)
from streamlet_operator.model import DEFAULT_IMAGE as BROKER_IMAGE
from streamlet_operator.model import BrokerModel, StreamModel
from tests.chart.conftest import CHART, KUBE_VERSIONS, ROOT
from tests.chart.pod_security import pod_templates, violations
from tests.chart.test_builders import SPECS, broker
from tests.chart.test_chart import VALUE_SETS as CHART_VALUE_SETS
from tests.chart.test_chart import render
from tests.chart.test_policy_rbac import VALUE_SETS as RBAC_VALUE_SETS

helm_python.disable_logging()

SPARK = ROOT / "spark-on-k8s"
Pod = tuple[dict[str, Any], dict[str, Any]]  # (metadata, spec)

# --- the checker -------------------------------------------------------------------------------

GOOD: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "app", "image": "registry.example/app:1.0",
                    "ports": [{"containerPort": 8080}],
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]}}}],
    "volumes": [{"name": "data", "emptyDir": {}}, {"name": "c", "configMap": {"name": "c"}},
                {"name": "p", "persistentVolumeClaim": {"claimName": "p"}}],
}


def _pod(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    change(spec)
    return spec


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = spec["containers"][0]
    return container


def _sc(spec: dict[str, Any]) -> dict[str, Any]:
    sc: dict[str, Any] = _container(spec)["securityContext"]
    return sc


BAD: dict[str, Callable[[dict[str, Any]], object]] = {
    "host-network": lambda s: s.update(hostNetwork=True),
    "host-pid": lambda s: s.update(hostPID=True),
    "host-ipc": lambda s: s.update(hostIPC=True),
    "host-process": lambda s: s["securityContext"].update(windowsOptions={"hostProcess": True}),
    "privileged": lambda s: _sc(s).update(privileged=True),
    "add-sys-admin": lambda s: _sc(s)["capabilities"].update(add=["SYS_ADMIN"]),
    "add-chown": lambda s: _sc(s)["capabilities"].update(add=["CHOWN"]),  # baseline, not restricted
    "no-drop-all": lambda s: _sc(s)["capabilities"].update(drop=["NET_RAW"]),
    "host-path": lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "nfs-volume": lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
    "host-port": lambda s: _container(s)["ports"][0].update(hostPort=8080),
    "unsafe-sysctl": lambda s: s["securityContext"].update(
        sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    "apparmor-unconfined": lambda s: _sc(s).update(appArmorProfile={"type": "Unconfined"}),
    "selinux-type": lambda s: s["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
    "selinux-user": lambda s: _sc(s).update(seLinuxOptions={"user": "root"}),
    "proc-mount": lambda s: _sc(s).update(procMount="Unmasked"),
    "privilege-escalation": lambda s: _sc(s).update(allowPrivilegeEscalation=True),
    "privilege-escalation-unset": lambda s: _sc(s).pop("allowPrivilegeEscalation"),
    "run-as-root-allowed": lambda s: s["securityContext"].pop("runAsNonRoot"),
    "container-run-as-non-root-false": lambda s: _sc(s).update(runAsNonRoot=False),
    "run-as-user-0": lambda s: s["securityContext"].update(runAsUser=0),
    "container-run-as-user-0": lambda s: _sc(s).update(runAsUser=0),
    "no-seccomp": lambda s: s["securityContext"].pop("seccompProfile"),
    "seccomp-unconfined": lambda s: s["securityContext"].update(
        seccompProfile={"type": "Unconfined"}),
    "container-seccomp-unconfined": lambda s: _sc(s).update(seccompProfile={"type": "Unconfined"}),
    "init-container-unhardened": lambda s: s.update(
        initContainers=[{"name": "init", "image": "registry.example/init:1"}]),
    "ephemeral-container-privileged": lambda s: s.update(ephemeralContainers=[{
        "name": "debug", "image": "registry.example/debug:1",
        "securityContext": {**_sc(s), "privileged": True}}]),
    "no-security-context-at-all": lambda s: (s.pop("securityContext"),
                                             _container(s).pop("securityContext")),
}

ALSO_GOOD: dict[str, Callable[[dict[str, Any]], object]] = {
    "as-is": lambda s: None,
    # runAsNonRoot and seccomp on every container instead of the pod
    "per-container": lambda s: (s.update(securityContext={}), _sc(s).update(
        runAsNonRoot=True, seccompProfile={"type": "Localhost",
                                           "localhostProfile": "p.json"})),
    "net-bind-service": lambda s: _sc(s)["capabilities"].update(add=["NET_BIND_SERVICE"]),
    "safe-sysctl": lambda s: s["securityContext"].update(
        sysctls=[{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]),
    "selinux-container-t": lambda s: _sc(s).update(seLinuxOptions={"type": "container_t",
                                                                   "level": "s0:c1"}),
    "apparmor-runtime-default": lambda s: _sc(s).update(appArmorProfile={"type": "RuntimeDefault"}),
    "projected-and-csi": lambda s: s["volumes"].extend([
        {"name": "t", "projected": {"sources": []}}, {"name": "s", "csi": {"driver": "d"}}]),
}


@pytest.mark.parametrize("change", BAD.values(), ids=BAD.keys())
def test_checker_refuses(change: Callable[[dict[str, Any]], object]) -> None:
    assert violations(_pod(change)), "the checker let a pod outside the profile through"


def test_checker_refuses_an_unconfined_apparmor_annotation() -> None:
    meta = {"annotations": {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}}
    assert violations(copy.deepcopy(GOOD), meta)
    meta = {"annotations": {"container.apparmor.security.beta.kubernetes.io/app": "runtime/default"}}
    assert violations(copy.deepcopy(GOOD), meta) == []


@pytest.mark.parametrize("change", ALSO_GOOD.values(), ids=ALSO_GOOD.keys())
def test_checker_admits(change: Callable[[dict[str, Any]], object]) -> None:
    spec = _pod(change)
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                  "spec": spec}, KUBE_VERSIONS[-1], strict=True)
    assert violations(spec) == []


# --- what the project renders ------------------------------------------------------------------

CHART_SETS = {**CHART_VALUE_SETS, **RBAC_VALUE_SETS,
              "tagged": {"operator": {"image": {"tag": "0.2.0"}, "replicas": 3}}}


def _chart_pods(chart: helm_python.Chart, values: dict[str, Any]) -> list[Pod]:
    pods = [p for doc in render(chart, values) for p in pod_templates(doc)]
    assert pods, "the chart renders no pod"
    return pods


@pytest.mark.parametrize("values", CHART_SETS.values(), ids=CHART_SETS.keys())
def test_chart_pods_are_restricted(chart: helm_python.Chart, values: dict[str, Any]) -> None:
    for meta, spec in _chart_pods(chart, values):
        assert violations(spec, meta) == []


def _stream(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "streamlet.dev/v1alpha1", "kind": "Stream",
            "metadata": {"name": "orders", "namespace": "prod", "uid": "u-1"},
            "spec": {"broker": "events", "export": {"schedule": "@hourly",
                                                    "destination": "s3a://lake/orders"},
                     **spec}}


STREAMS = {"single": _stream(), "super": _stream(partitions=3),
           "own-image": _stream(export={"schedule": "@daily", "destination": "/x",
                                        "image": "registry.example/spark:2.0"})}


def _spark_app_pods(app: dict[str, Any]) -> list[Pod]:
    """The driver's and executors' pods as the Spark operator makes them from the spec's
    security contexts (one container each; the operator adds only allowed volume types)."""
    template = app["spec"]["template"]
    return [({"labels": template[role].get("labels", {})},
             {"securityContext": template[role].get("podSecurityContext", {}),
              "containers": [{"name": f"spark-kubernetes-{role}", "image": template["image"],
                              "securityContext": template[role].get("securityContext", {})}]})
            for role in ("driver", "executor")]


def _template_file(role: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SPARK / "pod-templates" / f"{role}.yaml").read_text())
    return doc


def _builder_pods() -> dict[str, Pod]:
    pods: dict[str, Pod] = {}
    for name, spec in SPECS.items():
        if name == "overrides":  # its sidecar is the user's: tests below
            continue
        for manifest in build_all(broker(**spec), 3, {"app": "x"}):
            for i, pod in enumerate(pod_templates(manifest)):
                pods[f"broker-{name}-{manifest['kind']}-{i}"] = pod
    # plaintext, and mutual TLS (the CA and the client certificate handed to the driver)
    mtls = ExportConnection(5551, ExportTls("broker-tls", "orders-export-client"))
    for name, body in STREAMS.items():
        for how, connection in (("", PLAIN), ("-mtls", mtls)):
            cronjob = build_export_cronjob(body, connection)
            assert cronjob is not None
            [pods[f"export-cronjob-{name}{how}"]] = pod_templates(cronjob)
            app = build_scheduled_spark_application(body, connection)
            assert app is not None
            driver, executor = _spark_app_pods(app)
            pods[f"spark-app-driver-{name}{how}"] = driver
            pods[f"spark-app-executor-{name}{how}"] = executor
    for role in ("driver", "executor"):
        doc = _template_file(role)
        pods[f"spark-template-{role}"] = (doc["metadata"], doc["spec"])
    manifest = yaml.safe_load((SPARK / "manifests" / "sparkapplication.yaml").read_text())
    driver, executor = _spark_app_pods({"spec": {"template": manifest["spec"]}})
    pods["spark-manifest-driver"], pods["spark-manifest-executor"] = driver, executor
    return pods


BUILDER_PODS = _builder_pods()


@pytest.mark.parametrize("pod", BUILDER_PODS.values(), ids=BUILDER_PODS.keys())
def test_builder_and_spark_pods_are_restricted(pod: Pod) -> None:
    meta, spec = pod
    assert violations(spec, meta) == []


def test_a_user_sidecar_is_the_user_s_to_harden() -> None:
    """The broker's own container stays restricted whatever podTemplate merges in; a sidecar
    without a security context is flagged (the checker sees merged pods, not only ours)."""
    [(meta, spec)] = [p for m in build_all(broker(**SPECS["overrides"]), 1, {})
                      for p in pod_templates(m)]
    found = violations(spec, meta)
    assert found and all("containers[sidecar]" in v for v in found)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("role", ["driver", "executor"])
def test_spark_pod_templates_are_valid_pods(role: str, version: str) -> None:
    kubernetes_validate.validate(_template_file(role), version, strict=True)


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_spark_templates_and_builder_agree(role: str) -> None:
    """spark-submit's pod templates (CronJob export) and the Spark operator's spec
    (ScheduledSparkApplication) set the same contexts, and spark-submit is told to use them."""
    spec = _template_file(role)["spec"]
    assert spec["securityContext"] == POD_SECURITY_CONTEXT
    [container] = spec["containers"]
    assert container["securityContext"] == CONTAINER_SECURITY_CONTEXT
    command = spark_submit_command(StreamModel.from_body(_stream()),
                                   _export(_stream()))
    confs = dict(a.split("=", 1) for a in command if a.startswith("spark.kubernetes."))
    assert confs[f"spark.kubernetes.{role}.podTemplateFile"] == f"{POD_TEMPLATES}/{role}.yaml"
    assert confs[f"spark.kubernetes.{role}.podTemplateContainerName"] == container["name"]
    # the image carries them where the conf says
    dockerfile = (SPARK / "Dockerfile").read_text()
    assert f"COPY spark-on-k8s/pod-templates {POD_TEMPLATES}" in dockerfile
    submit = (SPARK / "submit.sh").read_text()
    assert f"spark.kubernetes.{role}.podTemplateFile=${{TEMPLATES}}/{role}.yaml" in submit


def _export(body: dict[str, Any]) -> Any:
    from streamlet_operator.builders.export import ExportSpec
    return ExportSpec.from_stream(body)


# --- images ------------------------------------------------------------------------------------

def image_problem(image: str) -> str | None:
    """Why ``image`` is not pinned: no registry host, or no tag (or digest), or latest."""
    name, _, digest = image.partition("@")
    first, _, rest = name.partition("/")
    if not rest or not ("." in first or ":" in first or first == "localhost"):
        return f"{image}: no registry"
    repo_tail = name.rsplit("/", 1)[-1]
    if ":" not in repo_tail:
        return None if digest else f"{image}: no tag"
    if repo_tail.rsplit(":", 1)[1] == "latest":
        return f"{image}: latest"
    return None


@pytest.mark.parametrize("image,problem", [
    ("ghcr.io/streamlet/operator:0.1.0", False),
    ("localhost:5000/x:1", False),
    ("registry.example/spark@sha256:" + "0" * 64, False),
    ("streamlet-spark:0.1.0", True), ("busybox", True), ("ghcr.io/a/b", True),
    ("ghcr.io/a/b:latest", True), ("library/redis:7", True)])
def test_image_check(image: str, problem: bool) -> None:
    assert (image_problem(image) is not None) is problem


def _images(spec: dict[str, Any]) -> list[str]:
    return [c["image"] for field in ("initContainers", "containers")
            for c in spec.get(field) or [] if "image" in c]


@pytest.mark.parametrize("values", CHART_SETS.values(), ids=CHART_SETS.keys())
def test_chart_images_are_pinned(chart: helm_python.Chart, values: dict[str, Any]) -> None:
    docs = render(chart, values)
    images = [i for _, spec in _chart_pods(chart, values) for i in _images(spec)]
    images += [d["spec"]["image"] for d in docs if d["kind"] == "Broker" and "image" in d["spec"]]
    assert images
    assert [p for p in map(image_problem, images) if p] == []


def test_default_images_are_pinned(chart: helm_python.Chart) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    crd_default = yaml.safe_load((ROOT / "crds" / "streamlet.dev_brokers.yaml").read_text())[
        "spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["image"]["default"]
    images = [DEFAULT_IMAGE, BROKER_IMAGE, BrokerModel.from_body(
        {"metadata": {"name": "b", "namespace": "n"}, "spec": {}}).image,
              crd_default]
    # the chart's Broker (broker.image as its spec.image)
    docs = render(chart, {"broker": {"create": True}})
    [broker] = [d for d in docs if d["kind"] == "Broker"]
    images.append(broker["spec"]["image"])
    # the exports' Spark image the chart gives the operator
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    images += [e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
               if e["name"] == "STREAMLET_OPERATOR_SPARK_IMAGE"]
    images += [i for pod in BUILDER_PODS.values() for i in _images(pod[1])]
    images += [build_scheduled_spark_application(_stream())["spec"]["template"]["image"],  # type: ignore[index]
               yaml.safe_load((SPARK / "manifests" / "sparkapplication.yaml").read_text())[
                   "spec"]["image"]]
    assert [p for p in map(image_problem, images) if p] == []
    # and what spark-submit gives the driver and executors
    command = spark_submit_command(StreamModel.from_body(_stream()), _export(_stream()))
    [conf] = [a for a in command if a.startswith("spark.kubernetes.container.image=")]
    assert image_problem(conf.split("=", 1)[1]) is None
    assert json.dumps(values).count(":latest") == 0
