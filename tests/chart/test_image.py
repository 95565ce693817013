"""How the chart references each image it names, the operator's (operator.image), its
Broker's (broker.image, as spec.image unless broker.spec names one) and the exports' Spark image
(spark.image, passed to the operator): repository:tag (the tag defaulting to the chart's
appVersion), or repository@digest when the digest is set (a sha256 digest, the only form the
values schema takes)."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest

from streamlet_operator.builders.export import DEFAULT_IMAGE as SPARK_IMAGE
from tests.chart.conftest import CHART, KUBE_VERSIONS, crd_schema
from tests.chart.schema import validate
from tests.chart.test_chart import by_kind, render

helm_python.disable_logging()

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(("image", "expected"), [
    ({}, "ghcr.io/streamlet/operator:0.1.0"),
    ({"tag": "0.2.0"}, "ghcr.io/streamlet/operator:0.2.0"),
    ({"digest": ""}, "ghcr.io/streamlet/operator:0.1.0"),
    ({"digest": DIGEST}, f"ghcr.io/streamlet/operator@{DIGEST}"),
    ({"tag": "0.2.0", "digest": DIGEST}, f"ghcr.io/streamlet/operator@{DIGEST}"),
    ({"repository": "registry.example/op", "digest": DIGEST}, f"registry.example/op@{DIGEST}"),
], ids=["default", "tag", "empty-digest", "digest", "digest-wins-over-tag", "other-repository"])
def test_image_reference(chart: helm_python.Chart, image: dict[str, Any], expected: str) -> None:
    deployment = by_kind(render(chart, {"operator": {"image": image}}), "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == expected


@pytest.mark.parametrize(("broker", "expected"), [
    ({}, "ghcr.io/streamlet/broker:0.1.0"),
    ({"image": {"tag": "0.2.0"}}, "ghcr.io/streamlet/broker:0.2.0"),
    ({"image": {"digest": DIGEST}}, f"ghcr.io/streamlet/broker@{DIGEST}"),
    ({"image": {"tag": "0.2.0", "digest": DIGEST}}, f"ghcr.io/streamlet/broker@{DIGEST}"),
    ({"image": {"repository": "registry.example/b", "digest": DIGEST}},
     f"registry.example/b@{DIGEST}"),
    ({"image": {"digest": DIGEST}, "spec": {"image": "registry.example/b:1.0"}},
     "registry.example/b:1.0"),
    ({"spec": {"image": f"registry.example/b@{DIGEST}"}}, f"registry.example/b@{DIGEST}"),
], ids=["default", "tag", "digest", "digest-wins-over-tag", "other-repository",
        "spec-image-wins", "spec-image-digest"])
def test_broker_image_reference(chart: helm_python.Chart, broker: dict[str, Any],
                                expected: str) -> None:
    made = by_kind(render(chart, {"broker": {"create": True, **broker}}), "Broker")
    assert made["spec"]["image"] == expected
    assert made["spec"]["replicas"] == 1  # the rest of broker.spec kept
    validate(made, crd_schema("Broker"))


def _spark_image(docs: list[dict[str, Any]]) -> str:
    container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    [value] = [e["value"] for e in container["env"] if e["name"] == "STREAMLET_OPERATOR_SPARK_IMAGE"]
    return str(value)


@pytest.mark.parametrize(("image", "expected"), [
    ({}, "ghcr.io/streamlet/spark:0.1.0"),
    ({"tag": "0.2.0"}, "ghcr.io/streamlet/spark:0.2.0"),
    ({"digest": DIGEST}, f"ghcr.io/streamlet/spark@{DIGEST}"),
    ({"tag": "0.2.0", "digest": DIGEST}, f"ghcr.io/streamlet/spark@{DIGEST}"),
    ({"repository": "registry.example/spark", "digest": DIGEST},
     f"registry.example/spark@{DIGEST}"),
], ids=["default", "tag", "digest", "digest-wins-over-tag", "other-repository"])
def test_spark_image_reaches_the_operator(chart: helm_python.Chart, image: dict[str, Any],
                                          expected: str) -> None:
    assert _spark_image(render(chart, {"spark": {"image": image}})) == expected


def test_the_charts_spark_image_is_the_operators_default(chart: helm_python.Chart) -> None:
    assert _spark_image(render(chart)) == SPARK_IMAGE


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_digest_deployment_is_valid(chart: helm_python.Chart, version: str) -> None:
    deployment = by_kind(render(chart, {"operator": {"image": {"digest": DIGEST}},
                                        "spark": {"image": {"digest": DIGEST}}}), "Deployment")
    kubernetes_validate.validate(deployment, version, strict=True)


def test_digest_lint_is_clean() -> None:
    result = helm_python.lint(CHART, {"operator": {"image": {"digest": DIGEST}},
                                      "broker": {"create": True, "image": {"digest": DIGEST}},
                                      "spark": {"image": {"digest": DIGEST}}},
                              strict=True, kube_version="1.30.0", quiet=True)
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("digest", [
    "0123456789abcdef" * 4, "sha256:abc", "sha256:" + "0123456789ABCDEF" * 4,
    "sha512:" + "0123456789abcdef" * 4, f"{DIGEST}x",
], ids=["no-algorithm", "short", "upper-case", "sha512", "trailing"])
@pytest.mark.parametrize("component", ["operator", "broker", "spark"])
def test_values_schema_refuses_a_bad_digest(chart: helm_python.Chart, digest: str,
                                            component: str) -> None:
    with pytest.raises(helm_python.HelmError):
        render(chart, {component: {"image": {"digest": digest}}})


@pytest.mark.parametrize("component", ["broker", "spark"])
@pytest.mark.parametrize("image", [{"repository": ""}, {"tag": "latest"}, {"pullPolicy": "Never"}],
                         ids=["empty-repository", "latest", "unknown-key"])
def test_values_schema_refuses_a_bad_image(chart: helm_python.Chart, image: dict[str, Any],
                                           component: str) -> None:
    with pytest.raises(helm_python.HelmError):
        render(chart, {component: {"image": image}})
