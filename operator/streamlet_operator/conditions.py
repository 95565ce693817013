"""Status conditions in the Kubernetes convention (type, status, reason, message, times)."""

from __future__ import annotations

import datetime
from typing import Any


def now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[dict[str, Any]] | None,
    type_: str,
    status: bool,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """A new conditions list with one condition set; its transition time moves only on change."""
    result = [dict(c) for c in (conditions or []) if c.get("type") != type_]
    old = next((c for c in conditions or [] if c.get("type") == type_), None)
    value = "True" if status else "False"
    cond: dict[str, Any] = {"type": type_, "status": value, "reason": reason, "message": message}
    if generation is not None:
        cond["observedGeneration"] = generation
    if old is None or old.get("status") != value:
        cond["lastTransitionTime"] = now()
    else:
        cond["lastTransitionTime"] = old.get("lastTransitionTime") or now()
    result.append(cond)
    return sorted(result, key=lambda c: c["type"])


def remove_condition(conditions: list[dict[str, Any]] | None, type_: str) -> list[dict[str, Any]]:
    return [dict(c) for c in (conditions or []) if c.get("type") != type_]


def get_condition(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def adopt(ours: list[dict[str, Any]], theirs: list[dict[str, Any]] | None,
          types: frozenset[str]) -> list[dict[str, Any]]:
    """``ours`` with the conditions of ``types`` taken from ``theirs``: a writer of a whole
    list keeps another writer's conditions as they are now, not as its older read had them."""
    kept = [dict(c) for c in ours if c.get("type") not in types]
    kept += [dict(c) for c in theirs or [] if c.get("type") in types]
    return sorted(kept, key=lambda c: c["type"])


def raised(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """Whether a condition went True, or changed its reason while True: worth one Event, where
    the passes in between (same status, same reason) post none."""
    if new is None or new.get("status") != "True":
        return False
    return old is None or old.get("status") != "True" or old.get("reason") != new.get("reason")
