"""Helpers the Broker and Stream handlers share."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf

from .. import day2
from ..conditions import get_condition, remove_condition, set_condition
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


def pause_pass(body: Mapping[str, Any], patch: kopf.Patch, kind: str) -> day2.PauseChange:
    """The pause annotation's effect on this pass (day2.pause_change): the condition written
    and one Event posted when it changes. The caller reconciles nothing while
    ``paused(...)``; on a resume it reconciles and drops the condition itself (resumed)."""
    meta = body.get("metadata") or {}
    annotated = day2.paused(meta.get("annotations"))
    conditions = (body.get("status") or {}).get("conditions")
    change = day2.pause_change(annotated, get_condition(conditions, day2.PAUSED) is not None)
    if change.condition:
        message = (f"the {day2.PAUSE} annotation is true: the operator leaves this {kind}"
                   " alone until it is removed")
        patch.status["conditions"] = set_condition(
            conditions, day2.PAUSED, True, day2.PAUSED_BY_ANNOTATION, message,
            int(meta.get("generation") or 0))
    if change.event is not None:
        kopf.event(cast(kopf.Body, body), type="Normal", reason=change.event,
                   message=(f"reconciliation paused ({day2.PAUSE})" if change.condition
                            else f"reconciliation resumed ({day2.PAUSE} removed)"))
    return change


def resumed(status: dict[str, Any], patch: kopf.Patch) -> None:
    """A resumed pass's status written without the ReconciliationPaused condition."""
    status["conditions"] = remove_condition(status.get("conditions"), day2.PAUSED)
    patch.status["conditions"] = status["conditions"]
