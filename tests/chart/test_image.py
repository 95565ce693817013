"""How the chart references the operator's image: repository:tag (the tag defaulting to the
chart's appVersion), or repository@digest when operator.image.digest is set (a sha256 digest,
the only form the values schema takes)."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest

from tests.chart.conftest import CHART, KUBE_VERSIONS
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


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_digest_deployment_is_valid(chart: helm_python.Chart, version: str) -> None:
    deployment = by_kind(render(chart, {"operator": {"image": {"digest": DIGEST}}}), "Deployment")
    kubernetes_validate.validate(deployment, version, strict=True)


def test_digest_lint_is_clean() -> None:
    result = helm_python.lint(CHART, {"operator": {"image": {"digest": DIGEST}}}, strict=True,
                              kube_version="1.30.0", quiet=True)
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("digest", [
    "0123456789abcdef" * 4, "sha256:abc", "sha256:" + "0123456789ABCDEF" * 4,
    "sha512:" + "0123456789abcdef" * 4, f"{DIGEST}x",
], ids=["no-algorithm", "short", "upper-case", "sha512", "trailing"])
def test_values_schema_refuses_a_bad_digest(chart: helm_python.Chart, digest: str) -> None:
    with pytest.raises(helm_python.HelmError):
        render(chart, {"operator": {"image": {"digest": digest}}})
