"""A Stream's replicas changed between 1 and more, the operator's decisions as tables: when a
stream of one copy is recorded as a one-member replicated stream, and which Streams the
placement driver looks after (one shrunk to one member stays its)."""

from __future__ import annotations

from typing import Any

import pytest

from streamlet_operator.driver import replicated
from streamlet_operator.failover import ELECTING, ONE_COPY, Replication, one_copy


@pytest.mark.parametrize(("holders", "plain", "moving", "expected"), [
    pytest.param([2], True, False, Replication(1, 2, (2,), (), ELECTING, ONE_COPY),
                 id="its pod alone holds it, no member state: recorded, leading epoch 1"),
    pytest.param([2], False, False, None,
                 id="member state, or no answer: a replicated Create's copy, not known yet"),
    pytest.param([1, 2], True, False, None, id="another pod holds a copy too: not one stream"),
    pytest.param([], True, False, None, id="gone from its pod"),
    pytest.param([1], True, False, None, id="held by a pod it is not placed on"),
    pytest.param([2], True, True, None, id="a move under way: after it ends"),
])
def test_one_copy(holders: list[int], plain: bool, moving: bool,
                  expected: Replication | None) -> None:
    assert one_copy(2, holders, plain, moving) == expected


def _stream(applied: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "s"},
            "status": {"applied": {"broker": "b", **applied},
                       "placement": [{"stream": "s", "pod": "b-0", "ordinal": 0}], **status}}


RECORD = Replication(3, 0, (0,)).to_dict()


@pytest.mark.parametrize(("obj", "expected"), [
    pytest.param(_stream({}), False, id="one copy: the Stream reconciler's"),
    pytest.param(_stream({"replicas": 3}), True, id="three copies"),
    pytest.param(_stream({"replicas": 3}, replication=RECORD), True,
                 id="one copy asked to grow, recorded"),
    pytest.param(_stream({"replicas": 1}, replication=RECORD), True,
                 id="shrunk to one member: its record kept"),
    pytest.param(_stream({"replicas": 3, "broker": "c"}), False, id="another Broker's"),
    pytest.param({"metadata": {"name": "s"}, "status": {"applied": {"broker": "b",
                                                                    "replicas": 3}}},
                 False, id="not placed yet"),
])
def test_the_streams_the_placement_driver_looks_after(obj: dict[str, Any],
                                                      expected: bool) -> None:
    assert replicated(obj, "b") is expected
