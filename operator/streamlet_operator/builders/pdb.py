"""A PodDisruptionBudget: voluntary evictions take one broker pod at a time."""

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
