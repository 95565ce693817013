"""A PodDisruptionBudget: voluntary evictions take one broker pod at a time. A pod's readiness
reflects its replicated members (the broker's /ready), so one still catching up counts as down
and an eviction waits for it rather than take a second member of its streams."""

from __future__ import annotations

from typing import Any

from .. import names
from ..model import BrokerModel
from .common import metadata


def build_pdb(broker: BrokerModel) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(broker, broker.name),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": names.selector(broker.name)},
        },
    }
