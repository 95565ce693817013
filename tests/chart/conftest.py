"""Shared helpers: the repository's CRDs and their schemas, and the chart loaded once a module."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
CHART = ROOT / "charts" / "streamlet"
EXAMPLES = ROOT / "examples"
KUBE_VERSIONS = ("1.28", "1.30", "1.33")


@functools.cache
def _parsed_crds() -> dict[str, dict[str, Any]]:
    crds = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        crds[crd["spec"]["names"]["kind"]] = crd
    return crds


def load_crds() -> dict[str, dict[str, Any]]:
    """kind -> CRD object (a copy of what was read once: a test may change its own)."""
    return copy.deepcopy(_parsed_crds())


def crd_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = load_crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    """The chart, loaded by Helm's own library (closed after the module's tests)."""
    loaded = helm_python.Chart.load(CHART)
    yield loaded
    loaded.close()
