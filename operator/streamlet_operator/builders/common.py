"""Metadata shared by every child object of a Broker."""

from __future__ import annotations

from typing import Any

from .. import names
from ..constants import API_VERSION
from ..model import BrokerModel


def owner_reference(broker: BrokerModel) -> dict[str, Any]:
    # The Broker owns its children: deleting it lets Kubernetes' garbage collector remove them.
    return {
        "apiVersion": API_VERSION,
        "kind": "Broker",
        "name": broker.name,
        "uid": broker.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(broker: BrokerModel, name: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": broker.namespace,
        "labels": names.labels(broker.name),
    }
    if broker.uid:
        meta["ownerReferences"] = [owner_reference(broker)]
    meta.update(extra)
    return meta


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escaping is a subset TOML accepts)."""
    import json

    return json.dumps(value, ensure_ascii=True)
