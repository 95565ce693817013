"""The operator's decisions on member set changes, as tables: which pods are lost, the pods as
next_change sees them, a change's record as it starts, the MembersChanging condition, the
record's round trip, a Broker's replaceAfter and the scale-down condition's arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from streamlet.replication.membership import Change, Kind
from streamlet.replication.placement import Pod
from streamlet_operator.failover import (
    LOST,
    MEMBERS_CHANGING,
    READY,
    REMOVED_POD,
    RESIZE,
    Changing,
    Replication,
    change_pods,
    changing_condition,
    start_change,
    unready,
)
from streamlet_operator.model import BrokerModel, parse_duration

STARTED = "2026-01-01T00:00:00Z"


def test_unready_by_probe_or_pod_condition() -> None:
    """Not answering, or a Pod that says not Ready; a pod without a Pod object counts by its
    probe alone."""
    assert unready({0, 1, 2, 3}, up={0, 1, 3}, pod_ready={1: False, 3: True}) == {1, 2}
    assert unready({0, 1}, up={0, 1}, pod_ready={}) == set()


def test_change_pods() -> None:
    """A scale-down to 3 pods: pod 3 is draining; pod 1 is unready, pod 2 drained: neither
    takes a new member."""
    pods = change_pods({0, 1, 2, 3}, up={0, 2, 3}, not_ready={1}, avoid={2}, staying=3,
                       zones={0: "a"})
    assert pods == [Pod(0, "a", False, True), Pod(1, None, False, False),
                    Pod(2, None, False, False), Pod(3, None, True, True)]


@pytest.mark.parametrize(("change", "lost_now", "removed", "reason", "step"), [
    pytest.param(Change(Kind.ADD, 3), {1}, set(), LOST, "learn", id="add replacing a lost one"),
    pytest.param(Change(Kind.ADD, 3), set(), {2}, REMOVED_POD, "learn",
                 id="add replacing one on a removed pod"),
    pytest.param(Change(Kind.ADD, 3), set(), set(), RESIZE, "learn", id="add: more replicas"),
    pytest.param(Change(Kind.REMOVE, 1), {1}, set(), LOST, "join", id="remove the lost one"),
    pytest.param(Change(Kind.REMOVE, 2), {1}, set(), RESIZE, "join",
                 id="remove a healthy one: fewer replicas"),
    pytest.param(Change(Kind.REMOVE, 3), set(), {3}, REMOVED_POD, "join",
                 id="remove the one on a removed pod"),
])
def test_start_change(change: Change, lost_now: set[int], removed: set[int], reason: str,
                      step: str) -> None:
    started = start_change(change, (0, 1, 2) if change.kind is Kind.ADD else (0, 1, 2, 3),
                           lost_now, removed, STARTED, "why")
    assert (started.change, started.reason, started.step) == (change, reason, step)
    assert started.replaces is (reason != RESIZE)


ADDING = Changing(Kind.ADD, 3, "learn", STARTED, LOST, "replacing member 1")
BUSY = Replication(4, 0, (0, 1, 2), (0, 2), READY, "Elected", changing=ADDING, leaving=(5,))


def test_record_round_trip_with_a_change() -> None:
    doc = BUSY.to_dict()
    assert doc["changing"] == {"kind": "add", "member": 3, "step": "learn", "started": STARTED,
                               "reason": LOST, "message": "replacing member 1"}
    assert doc["leaving"] == [5]
    assert Replication.from_status({"replication": doc}) == BUSY
    idle = Replication(4, 0, (0, 1, 2))
    assert idle.to_dict()["changing"] is None  # a merge patch drops the field
    assert Replication.from_status({"replication": idle.to_dict()}) == idle


def test_changing_condition() -> None:
    idle = Replication(4, 0, (0, 1, 2))
    assert changing_condition({"": idle})[:3] == (MEMBERS_CHANGING, False, "NoChange")
    type_, value, reason, message = changing_condition({"": BUSY})
    assert (value, reason) == (True, LOST)
    assert message == "add member 3 (learn): replacing member 1"
    _, value, _, message = changing_condition({"s-0": idle, "s-1": BUSY, "s-2": None})
    assert value and message.startswith("s-1: add member 3") and "s-0" not in message


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("5m", 300), ("1h30m", 5400), ("0", 0), ("0.5s", 0.5)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_parse_duration_refuses_other_text() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("5 minutes")


def test_replace_after() -> None:
    def broker(spec: dict[str, Any]) -> BrokerModel:
        return BrokerModel.from_body({"metadata": {"name": "b"}, "spec": spec})

    assert broker({}).replace_after == 300
    assert broker({"replication": {"replaceAfter": "2s"}}).replace_after == 2
