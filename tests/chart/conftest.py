"""Shared helpers: the repository's CRDs and their schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
CHART = ROOT / "charts" / "streamlet"
EXAMPLES = ROOT / "examples"
KUBE_VERSIONS = ("1.28", "1.30", "1.33")


def load_crds() -> dict[str, dict[str, Any]]:
    """kind -> CRD object."""
    crds = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crds[crd["spec"]["names"]["kind"]] = crd
    return crds


def crd_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = load_crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema
