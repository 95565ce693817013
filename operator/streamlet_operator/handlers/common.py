"""Helpers the Broker and Stream handlers share."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from ..runtime import Runtime

#: What kopf hands handlers as ``logger``.
Logger = logging.Logger | logging.LoggerAdapter[Any]


def runtime_of(memo: Any) -> Runtime:
    runtime = getattr(memo, "runtime", None)
    if runtime is None:
        raise kopf.TemporaryError("the operator's runtime is not set up yet", delay=1)
    assert isinstance(runtime, Runtime)
    return runtime


def write_status(patch: kopf.Patch, old: Mapping[str, Any] | None,
                 new: Mapping[str, Any]) -> None:
    """Patch only the status fields that changed: an unchanged status costs no API write."""
    old = old or {}
    for key, value in new.items():
        if old.get(key) != value:
            patch.status[key] = value


def placements(index: Any, runtime: Runtime, namespace: str,
               broker: str) -> dict[str, list[int]]:
    """Stream resource name -> pod ordinals of its broker streams, for one Broker.

    kopf's index (filled from every Stream's status) is the truth; placements made moments
    ago, whose status kopf has not seen yet, come from the runtime's recent decisions.
    """
    result: dict[str, list[int]] = {}
    key = (namespace, broker)
    if index is not None and key in index:
        values: Iterable[dict[str, list[int]]] = index[key]
        for value in values:
            result.update(value)
    result.update(runtime.recent.get(key, {}))
    return {name: ordinals for name, ordinals in result.items() if ordinals}
