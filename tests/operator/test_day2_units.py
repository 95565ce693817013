"""Day-2 annotations' pure decisions (day2.py), as tables."""

from __future__ import annotations

import pytest

from streamlet_operator.day2 import (
    PAUSE,
    PAUSED,
    RESTART,
    RESUMED,
    PauseChange,
    pause_change,
    paused,
    restart_wanted,
)


@pytest.mark.parametrize(("annotations", "expected"), [
    (None, False),
    ({}, False),
    ({PAUSE: "true"}, True),
    ({PAUSE: " True "}, True),
    ({PAUSE: "false"}, False),
    ({PAUSE: "yes"}, False),
    ({PAUSE: ""}, False),
    ({"other": "true"}, False),
])
def test_paused(annotations: dict[str, str] | None, expected: bool) -> None:
    assert paused(annotations) is expected


@pytest.mark.parametrize(("annotated", "condition_set", "expected"), [
    (True, False, PauseChange(True, PAUSED)),  # paused now: condition and one Event
    (True, True, PauseChange(None, None)),  # still paused: nothing more
    (False, True, PauseChange(False, RESUMED)),  # resumed: condition dropped, one Event
    (False, False, PauseChange(None, None)),  # never paused
])
def test_pause_change(annotated: bool, condition_set: bool, expected: PauseChange) -> None:
    assert pause_change(annotated, condition_set) == expected


@pytest.mark.parametrize(("annotations", "handled", "expected"), [
    (None, None, None),
    ({}, "t1", None),
    ({RESTART: "t1"}, None, "t1"),  # a first value
    ({RESTART: "t1"}, "t1", None),  # handled already: no second roll
    ({RESTART: "t2"}, "t1", "t2"),  # a new value
    ({RESTART: " "}, None, None),
])
def test_restart_wanted(annotations: dict[str, str] | None, handled: str | None,
                        expected: str | None) -> None:
    assert restart_wanted(annotations, handled) == expected
