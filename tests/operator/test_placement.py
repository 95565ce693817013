"""Placement is a pure function of the cluster state."""

from __future__ import annotations

import pytest

from streamlet_operator.conditions import set_condition
from streamlet_operator.kube import is_subset, pruned
from streamlet_operator.placement import (
    blocked_scale_down,
    effective_replicas,
    members_held,
    place,
    stream_counts,
)


def test_counts_ignore_pods_beyond_replicas() -> None:
    assert stream_counts([[0], [1, 1], [5]], 3) == [1, 2, 0]


def test_place_picks_the_least_loaded_lowest_pod() -> None:
    assert place([0, 0, 0]) == 0
    assert place([1, 0, 1]) == 1
    assert place([2, 1, 1]) == 1
    with pytest.raises(ValueError):
        place([])


def test_repeated_placement_balances() -> None:
    counts = [0, 0, 0]
    for _ in range(9):
        counts[place(counts)] += 1
    assert counts == [3, 3, 3]


def test_scale_down_guard() -> None:
    held = {"a": [0], "b": [2, 2], "c": []}
    assert blocked_scale_down(held, 2) == {"b": [2, 2]}
    assert blocked_scale_down(held, 3) == {}
    assert effective_replicas(1, held) == 3
    assert effective_replicas(4, held) == 4
    assert effective_replicas(1, {}) == 1


def test_condition_transition_time_moves_only_on_change() -> None:
    first = set_condition(None, "Ready", False, "Waiting")
    same = set_condition([{**first[0], "lastTransitionTime": "then"}], "Ready", False, "Still")
    assert same[0]["lastTransitionTime"] == "then" and same[0]["reason"] == "Still"
    flipped = set_condition(same, "Ready", True, "Done")
    assert flipped[0]["lastTransitionTime"] != "then"


def test_is_subset() -> None:
    assert is_subset({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}, "d": 3})
    assert not is_subset({"a": [1, 2]}, {"a": [1]})
    assert not is_subset({"a": {"b": 1}}, {"a": {"b": 2}})


def test_a_replicated_stream_keeps_the_pods_of_its_members() -> None:
    """Members hold their pods: a scale-down may remove only pods no member is on; a stream
    whose members are not known yet keeps every pod."""
    held = members_held([("a", [0, 2, 3]), ("b", [0, 1, 2]), ("new", None)], 4)
    assert held == {"a": [0, 2, 3], "b": [0, 1, 2], "new": [0, 1, 2, 3]}
    assert blocked_scale_down(members_held([("a", [0, 2, 3])], 4), 3) == {"a": [3]}
    assert effective_replicas(2, members_held([("a", [0, 2, 3])], 4)) == 4
    assert effective_replicas(2, members_held([("b", [0, 1])], 4)) == 2
    assert effective_replicas(1, members_held([("new", None)], 3)) == 3


def test_is_subset_and_pruned_read_none_as_absent() -> None:
    """A None field is what a merge patch removes: absent is a match, and a create omits it."""
    assert is_subset({"s": {"type": "OnDelete", "rollingUpdate": None}}, {"s": {"type": "OnDelete"}})
    assert not is_subset({"s": {"rollingUpdate": None}}, {"s": {"rollingUpdate": {"partition": 0}}})
    assert pruned({"s": {"type": "OnDelete", "rollingUpdate": None}, "l": [{"a": None}]}) == {
        "s": {"type": "OnDelete"}, "l": [{}]}
