"""Zones from Nodes, and the planned transfers of a rebalance and of preferred leaders: pure
tables (operator/streamlet_operator/placement.py)."""

from __future__ import annotations

from typing import Any

import pytest

from streamlet.replication.membership import Change, Kind, Led, next_change
from streamlet.replication.placement import Load, Pod, place
from streamlet_operator.placement import (
    ZONE_LABEL,
    leadership_moves,
    member_pods,
    pod_zones,
    preferred_leaders,
)


def _pod(node: str | None = None, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"deletionTimestamp": "2026-11-29T00:00:00Z"} if deleting else {}
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def _node(zone: str | None) -> dict[str, Any]:
    return {"metadata": {"labels": {ZONE_LABEL: zone} if zone is not None else {"a": "b"}}}


NODES = {"n-a": _node("a"), "n-b": _node("b"), "n-c": _node("c"), "bare": _node(None),
         "empty": _node("")}


@pytest.mark.parametrize(("pods", "nodes", "zones"), [
    ({0: _pod("n-a"), 1: _pod("n-b"), 2: _pod("n-a")}, NODES, {0: "a", 1: "b", 2: "a"}),
    # not scheduled yet, on a node without the label or with an empty one
    ({0: _pod(), 1: _pod("bare"), 2: _pod("empty")}, NODES, {0: None, 1: None, 2: None}),
    # the Nodes could not be read (no permission): no zone, as before zones
    ({0: _pod("n-a"), 1: _pod("n-b")}, {}, {0: None, 1: None}),
    ({0: _pod("gone")}, NODES, {0: None}),
])
def test_a_pods_zone_is_its_nodes_label(pods: dict[int, Any], nodes: dict[str, Any],
                                        zones: dict[int, str | None]) -> None:
    assert pod_zones(pods, nodes) == zones


@pytest.mark.parametrize(("pods", "replicas", "avoid", "expected"), [
    ({0: _pod(), 1: _pod(), 2: _pod()}, 3, (),
     [Pod(0, "z0"), Pod(1, "z1"), Pod(2, "z2")]),
    # a pod not ready, one being deleted, one drained
    ({0: _pod(ready=False), 1: _pod(deleting=True), 2: _pod()}, 3, (2,),
     [Pod(0, "z0", False, False), Pod(1, "z1", True, True), Pod(2, "z2", True, True)]),
    # a scale-down to 2: pod 2 is being removed; a pod not made yet is not ready
    ({0: _pod(), 2: _pod()}, 2, (),
     [Pod(0, "z0"), Pod(1, "z1", False, False), Pod(2, "z2", True, True)]),
])
def test_member_pods(pods: dict[int, Any], replicas: int, avoid: tuple[int, ...],
                     expected: list[Pod]) -> None:
    zones = {o: f"z{o}" for o in range(3)}
    assert member_pods(pods, zones, replicas, avoid) == expected


def test_member_pods_that_answer_probes() -> None:
    """Given the pods that answer, a pod must answer to be ready; one without a Pod object
    (tests: no kubelet writes them) is ready when it answers."""
    pods = {0: _pod(), 1: _pod()}
    assert member_pods(pods, {}, 3, up={0, 2}) == [
        Pod(0), Pod(1, ready=False), Pod(2)]
    assert member_pods({}, {}, 2, up={0, 1, 2}) == [Pod(0), Pod(1), Pod(2, None, True)]


def test_zones_from_nodes_put_members_in_distinct_zones() -> None:
    """Six pods in three zones (0,3: a; 1,4: b; 2,5: c): three members go to three zones, a
    replacement goes to the zone the stream lacks."""
    nodes = {f"n{i}": _node("abc"[i % 3]) for i in range(6)}
    pods = {i: _pod(f"n{i}") for i in range(6)}
    placed = member_pods(pods, pod_zones(pods, nodes), 6)
    load = Load(hosted={1: 1, 2: 1})  # so zone-blind placement would take 0, 3, 4
    assert place(placed, 3, load, receiving=0).members == (0, 4, 5)
    blind = member_pods(pods, {}, 6)
    assert place(blind, 3, load, receiving=0).members == (0, 3, 4)  # two in zone a
    # member 1 (zone b) lost: its replacement is 4, the other pod of zone b
    step = next_change(3, [0, 1, 2], 0, placed, Load(), lost=[1])
    assert step.change == Change(Kind.ADD, 4)


def _led(leader: int, members: tuple[int, ...] = (0, 1, 2),
         in_sync: tuple[int, ...] = (0, 1, 2)) -> Led:
    return Led(leader, members, frozenset(in_sync))


THREE_ON_ZERO = {"s1": _led(0), "s2": _led(0), "s3": _led(0)}


@pytest.mark.parametrize(("streams", "pods", "preferred", "rebalance", "restore", "moves"), [
    # a rebalance: three streams led by pod 0 -> one each
    (THREE_ON_ZERO, (0, 1, 2), {}, True, True, [("s1", 1), ("s2", 2)]),
    # ... not onto a pod that may not lead (drained, being deleted, not ready)
    (THREE_ON_ZERO, (0, 1), {}, True, True, [("s1", 1)]),
    # ... nor onto a member out of sync
    ({"s1": _led(0, in_sync=(0,)), "s2": _led(0, in_sync=(0,))}, (0, 1, 2), {}, True, True, []),
    # balanced already
    ({"s1": _led(0), "s2": _led(1), "s3": _led(2)}, (0, 1, 2), {}, True, False, []),
    # no rebalance: each stream back to its preferred leader once it is in sync
    (THREE_ON_ZERO, (0, 1, 2), {"s1": 0, "s2": 1, "s3": 2}, False, True,
     [("s2", 1), ("s3", 2)]),
    ({"s1": _led(0, in_sync=(0, 1))}, (0, 1, 2), {"s1": 2}, False, True, []),
    # restorePreferredLeader false: nothing moves back
    (THREE_ON_ZERO, (0, 1, 2), {"s2": 1}, False, False, []),
    # the preferred leader on a pod that may not lead now (drained, rolling): it waits
    (THREE_ON_ZERO, (0, 2), {"s2": 1, "s3": 2}, False, True, [("s3", 2)]),
    # a preferred leader no longer a member (its member was replaced): never
    ({"s1": _led(0, members=(0, 1, 3), in_sync=(0, 1, 3))}, (0, 1, 2, 3), {"s1": 2}, False,
     True, []),
])
def test_leadership_moves(streams: dict[str, Led], pods: tuple[int, ...],
                          preferred: dict[str, int], rebalance: bool, restore: bool,
                          moves: list[tuple[str, int]]) -> None:
    assert leadership_moves(streams, pods, preferred, rebalance=rebalance,
                            restore=restore) == moves


@pytest.mark.parametrize(("records", "expected"), [
    ({"s": (None, 1)}, {"s": 1}),  # first look after discovery: the Create's leader
    ({"s": (2, 1)}, {}),  # recorded already: kept
    ({"s": (None, None)}, {}),  # no leader now: recorded at a later look
    ({"s-0": (None, 0), "s-1": (None, 2), "s-2": (1, 1)}, {"s-0": 0, "s-1": 2}),
])
def test_preferred_leaders(records: dict[str, tuple[int | None, int | None]],
                           expected: dict[str, int]) -> None:
    assert preferred_leaders(records) == expected
