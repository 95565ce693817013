"""conditions.adopt: a writer of a whole conditions list keeps another writer's conditions as
they are now (the Broker reconciler and the placement driver both write the Broker's);
conditions.raised: when a condition is worth an Event."""

from __future__ import annotations

from typing import Any

import pytest

from streamlet_operator.conditions import adopt, raised


def _c(type_: str, status: str = "True") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": type_, "message": ""}


DRIVER = frozenset({"Drained", "Rolling"})


@pytest.mark.parametrize(("ours", "theirs", "expected"), [
    # the driver set Drained after our read: kept
    ([_c("Ready")], [_c("Ready", "False"), _c("Drained")], [_c("Drained"), _c("Ready")]),
    # the driver removed Drained after our read: not written back
    ([_c("Drained"), _c("Ready")], [_c("Ready")], [_c("Ready")]),
    # the driver changed Rolling: its value, not ours
    ([_c("Rolling", "True"), _c("Ready")], [_c("Rolling", "False")],
     [_c("Ready"), _c("Rolling", "False")]),
    # nothing there now (a Broker without status)
    ([_c("Ready"), _c("Drained")], None, [_c("Ready")]),
    # ours are ours whatever theirs say
    ([_c("Ready", "False")], [_c("Ready", "True")], [_c("Ready", "False")]),
])
def test_adopt(ours: list[dict[str, Any]], theirs: list[dict[str, Any]] | None,
               expected: list[dict[str, Any]]) -> None:
    assert adopt(ours, theirs, DRIVER) == expected


@pytest.mark.parametrize(("old", "new", "expected"), [
    (None, _c("ScaleDownBlocked"), True),  # blocked now
    (_c("ScaleDownBlocked", "False"), _c("ScaleDownBlocked"), True),
    (_c("ScaleDownBlocked"), _c("ScaleDownBlocked"), False),  # still blocked: no more Events
    ({**_c("ScaleDownBlocked"), "reason": "MovingStreams"},
     {**_c("ScaleDownBlocked"), "reason": "PodsHoldStreams"}, True),  # blocked for another cause
    (_c("ScaleDownBlocked"), _c("ScaleDownBlocked", "False"), False),  # unblocked
    (None, _c("ScaleDownBlocked", "False"), False),
    (None, None, False),
])
def test_raised(old: dict[str, Any] | None, new: dict[str, Any] | None, expected: bool) -> None:
    assert raised(old, new) is expected
