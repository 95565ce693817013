"""Day-2 annotations on a Broker or a Stream, decided as pure functions (the handlers act).

``streamlet.dev/pause-reconciliation: "true"``: the operator leaves the object alone (no child
applied, no roll, no placement change) and says so in the ReconciliationPaused condition and
one Event; removing the annotation resumes. ``streamlet.dev/restart`` on a Broker: any new value
rolls its pods once, through the quorum-safe roll (rolling.py); the value handled is kept in
the Broker's status. Mechanism: docs/operations.md#day-2-annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PAUSE = "streamlet.dev/pause-reconciliation"
RESTART = "streamlet.dev/restart"
#: The condition a paused object carries (absent while it is not paused).
PAUSED = "ReconciliationPaused"
#: Its reason, and the Events of a pause starting and ending.
PAUSED_BY_ANNOTATION = "PausedByAnnotation"
RESUMED = "ReconciliationResumed"
#: The Event of a restart value taken (its roll then goes as any roll: the Rolling condition).
RESTART_REQUESTED = "RestartRequested"
#: The Broker's status field holding the restart value last handled.
RESTARTED_FIELD = "restartedAt"


def paused(annotations: Mapping[str, str] | None) -> bool:
    """Whether the pause annotation is set to true (case and spaces ignored)."""
    return (annotations or {}).get(PAUSE, "").strip().lower() == "true"


@dataclass(frozen=True)
class PauseChange:
    """What a pass does about the pause: the condition to set (True), to drop (False) or
    leave (None), and the Event to post (its reason, or None)."""

    condition: bool | None
    event: str | None


def pause_change(annotated: bool, condition_set: bool) -> PauseChange:
    """From the annotation and whether the ReconciliationPaused condition is there now: the
    condition and one Event on each change, nothing on the passes in between."""
    if annotated and not condition_set:
        return PauseChange(True, PAUSED)
    if not annotated and condition_set:
        return PauseChange(False, RESUMED)
    return PauseChange(None, None)


def restart_wanted(annotations: Mapping[str, str] | None, handled: str | None) -> str | None:
    """The restart value to handle now: the annotation's, when set and not the one handled
    last (None: nothing to do)."""
    value = (annotations or {}).get(RESTART, "").strip()
    if not value or value == (handled or ""):
        return None
    return value
