"""The exports' Spark image when a Stream names none: the operator's setting
(STREAMLET_OPERATOR_SPARK_IMAGE, which the chart sets from spark.image, a digest possible), else
the built-in default; a Stream's spec.export.image always wins. Table tests of the setting and
the builders, and the real operator making the CronJob with it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from streamlet_operator import exports
from streamlet_operator.builders.export import (
    DEFAULT_IMAGE,
    build_export_cronjob,
    build_scheduled_spark_application,
)
from streamlet_operator.kube import Kube
from streamlet_operator.settings import Settings
from tests.operator.test_export import EXPORT, exists, export_condition
from tests.operator.test_export_builder import STREAM, with_spec
from tests.operator.test_stream import stream_body

PINNED = "registry.example/spark@sha256:" + "0123456789abcdef" * 4
OWN = STREAM["spec"]["export"]["image"]


@pytest.mark.parametrize(("env", "expected"), [
    (None, ""), ("", ""), ("  ", ""), (PINNED, PINNED), (f" {PINNED}\n", PINNED),
], ids=["unset", "empty", "blank", "digest", "trimmed"])
def test_setting(monkeypatch: pytest.MonkeyPatch, env: str | None, expected: str) -> None:
    if env is None:
        monkeypatch.delenv("STREAMLET_OPERATOR_SPARK_IMAGE", raising=False)
    else:
        monkeypatch.setenv("STREAMLET_OPERATOR_SPARK_IMAGE", env)
    assert Settings.from_env().spark_image == expected


def _images(obj: dict[str, Any]) -> set[str]:
    """Every image an export object names: its pods' and the one spark-submit gives Spark."""
    if obj["kind"] == "CronJob":
        [container] = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        [conf] = [a for a in container["command"]
                  if a.startswith("spark.kubernetes.container.image=")]
        return {container["image"], conf.split("=", 1)[1]}
    return {obj["spec"]["template"]["image"]}


BUILDERS: list[Callable[..., dict[str, Any] | None]] = [build_export_cronjob,
                                                         build_scheduled_spark_application]


@pytest.mark.parametrize("build", BUILDERS, ids=["cronjob", "spark-operator"])
@pytest.mark.parametrize(("own", "default", "expected"), [
    (False, None, DEFAULT_IMAGE),
    (False, PINNED, PINNED),
    (True, None, OWN),
    (True, PINNED, OWN),
], ids=["built-in", "the-setting", "own", "own-over-the-setting"])
def test_builders(build: Callable[..., dict[str, Any] | None], own: bool, default: str | None,
                  expected: str) -> None:
    export = dict(STREAM["spec"]["export"])
    if not own:
        del export["image"]
    body = with_spec(export=export)
    obj = build(body) if default is None else build(body, default_image=default)
    assert obj is not None and _images(obj) == {expected}


async def test_the_operator_makes_exports_with_its_setting(
        kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exports, "SETTINGS",
                        dataclasses.replace(exports.SETTINGS, spark_image=PINNED))
    await kube.create(stream_body(namespace, "orders", export=EXPORT))
    await kube.create(stream_body(namespace, "refunds", export={**EXPORT, "image": OWN}))
    await export_condition(kube, namespace, "orders", "CronJobScheduled", "True")
    await export_condition(kube, namespace, "refunds", "CronJobScheduled", "True")
    assert _images(await exists(kube, "CronJob", namespace, "orders-export")) == {PINNED}
    assert _images(await exists(kube, "CronJob", namespace, "refunds-export")) == {OWN}
