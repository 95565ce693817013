"""drain.py's decisions, as tables: which pods a drain names, when a stream is moved off one,
which leaderships move where, and when the drain is complete."""

from __future__ import annotations

from typing import Any, cast

import pytest

from streamlet_operator.drain import (
    COMPLETE,
    DRAIN,
    DRAINING,
    Placed,
    must_move,
    progress,
    requested,
)
from streamlet_operator.driver import Driver
from streamlet_operator.failover import Replication
from streamlet_operator.model import BrokerModel
from streamlet_operator.placement import place
from streamlet_operator.rolling import PodState, StreamState, next_step
from streamlet_operator.runtime import Runtime


@pytest.mark.parametrize(("broker", "pods", "ordinals", "problems"), [
    ({}, {}, set(), 0),
    ({DRAIN: "2"}, {}, {2}, 0),
    ({DRAIN: " 1, 2 ,"}, {}, {1, 2}, 0),
    ({DRAIN: ""}, {}, set(), 0),
    ({DRAIN: "two"}, {}, set(), 1),
    ({}, {0: {}, 2: {DRAIN: "true"}}, {2}, 0),
    ({}, {2: {DRAIN: "True"}}, {2}, 0),
    ({}, {2: {DRAIN: "false"}}, set(), 0),
    ({}, {2: {DRAIN: "yes"}}, set(), 1),
    ({DRAIN: "0"}, {2: {DRAIN: "true"}}, {0, 2}, 0),  # both kinds add up
])
def test_requested(broker: dict[str, str], pods: dict[int, dict[str, str]], ordinals: set[int],
                   problems: int) -> None:
    got = requested(broker, pods)
    assert got.ordinals == ordinals
    assert len(got.problems) == problems


@pytest.mark.parametrize(("ordinal", "drained", "created", "replicas", "moving", "pods", "want"), [
    (2, {2}, True, 1, False, 3, True),
    (1, {2}, True, 1, False, 3, False),  # not on a drained pod
    (None, {2}, True, 1, False, 3, False),  # not placed
    (2, {2}, False, 1, False, 3, False),  # never created there: placed anew instead
    (2, {2}, True, 3, False, 3, False),  # replicated: members do not move
    (2, {2}, True, 1, True, 3, False),  # a move already going on
    (0, {0}, True, 1, False, 1, False),  # no other pod to take it
    (1, {0, 1}, True, 1, False, 2, False),  # every pod drained
])
def test_must_move(ordinal: int | None, drained: set[int], created: bool, replicas: int,
                   moving: bool, pods: int, want: bool) -> None:
    assert must_move(ordinal, drained, created=created, replicas=replicas, moving=moving,
                     pods=pods) is want


ALL = frozenset({0, 1, 2})
ALL_T = (0, 1, 2)


@pytest.mark.parametrize(("drained", "streams", "complete", "transfers", "says"), [
    # nothing on the pod: complete
    ({2}, [Placed("a", (0,))], True, (), "nothing leads or is placed on b-2"),
    # a single-replica stream on it: being moved
    ({2}, [Placed("a", (2,))], False, (), "1 stream still on b-2: a (on b-2, moving)"),
    # ... and while its move's source is the pod
    ({2}, [Placed("a", (0, 2))], False, (), "a (on b-2, moving)"),
    # nowhere to go
    ({0, 1, 2}, [Placed("a", (1,))], False, (), "no pod left to move it to"),
    # a replicated stream led from the pod: to the in-sync member leading fewest, lowest first
    ({2}, [Placed("r", (0, 1, 2), True, 2, ALL), Placed("s", (0, 1, 2), True, 0, ALL)],
     False, (("r", 1),), "r (leadership moving to b-1)"),
    # ... never to another drained pod
    ({1, 2}, [Placed("r", (0, 1, 2), True, 2, ALL)], False, (("r", 0),), "b-0"),
    # ... none in sync elsewhere: it waits
    ({2}, [Placed("r", (0, 1, 2), True, 2, frozenset({2}))], False, (),
     "no member in sync elsewhere"),
    # a member there, led elsewhere, a quorum in sync without it: complete, members noted
    ({2}, [Placed("r", (0, 1, 2), True, 0, frozenset({0, 1}))], True, (),
     "keep members there (a drain moves none), each with a quorum in sync elsewhere: r"),
    # ... taking the pod away would leave no quorum in sync: waits
    ({2}, [Placed("r", (0, 1, 2), True, 0, frozenset({0, 2}))], False, (),
     "r (1 member(s) in sync elsewhere, 2 needed)"),
    # two drained pods of three: no quorum left for any 3-member stream
    ({1, 2}, [Placed("r", (0, 1, 2), True, 0, ALL)], False, (), "2 needed"),
    # not looked at yet (being elected): waits
    ({2}, [Placed("r", (0, 1, 2), True, None, None)], False, (), "not looked at yet"),
    # a replicated stream with no member on the pod does not matter
    ({2}, [Placed("r", (0, 1), True, 0, frozenset())], True, (), "nothing leads"),
    # several left: counted
    ({2}, [Placed("a", (2,)), Placed("r", (0, 1, 2), True, 2, ALL)], False, (("r", 0),),
     "2 streams still on b-2"),
])
def test_progress(drained: set[int], streams: list[Placed], complete: bool,
                  transfers: tuple[tuple[str, int], ...], says: str) -> None:
    got = progress(drained, streams, 3, "b")
    assert got.complete is complete
    assert got.reason == (COMPLETE if complete else DRAINING)
    assert got.transfers == transfers
    assert says in got.message, got.message


@pytest.mark.parametrize(("counts", "avoid", "want"), [
    ([0, 0, 0], (), 0),
    ([0, 0, 0], (0,), 1),
    ([5, 1, 0], (2,), 1),
    ([1, 1, 1], (0, 1, 2), 0),  # every pod drained: placed all the same
])
def test_place_avoids_drained_pods(counts: list[int], avoid: tuple[int, ...], want: int) -> None:
    assert place(counts, avoid=avoid) == want


def test_a_roll_gives_no_leadership_to_a_drained_pod() -> None:
    pods = [PodState(0, "new"), PodState(1, "new"), PodState(2, "old")]
    streams = [StreamState("r", (0, 1, 2), 2, ALL)]
    assert next_step(pods, "new", streams, ALL, 3).transfers == (("r", 0),)
    assert next_step(pods, "new", streams, ALL, 3, avoid={0}).transfers == (("r", 1),)


# --- a replicated super stream: each partition counts on its own ---------------------------

def _super_stream(leaders: list[int], in_sync: list[tuple[int, ...]]) -> dict[str, Any]:
    partitions = [f"orders-{i}" for i in range(len(leaders))]
    return {"metadata": {"name": "orders"}, "status": {
        "applied": {"name": "orders", "broker": "b", "partitions": len(leaders), "replicas": 3},
        "placement": [{"stream": p, "pod": f"b-{o}", "ordinal": o}
                      for p, o in zip(partitions, leaders, strict=True)],
        "partitionReplication": {
            p: Replication(1, o, (0, 1, 2), s, "Ready", "Created").to_dict()
            for p, o, s in zip(partitions, leaders, in_sync, strict=True)}}}


def test_the_drain_and_the_roll_see_each_partition_of_a_replicated_super_stream() -> None:
    """The drain gets one entry per partition (its members, leader and in-sync members): a
    drained pod's leadership of one partition is transferred, the others stay; the roll
    counts each partition's members when it asks whether a pod may stop."""
    obj = _super_stream([0, 1, 2], [ALL_T, ALL_T, (1, 2)])
    broker = BrokerModel.from_body({"metadata": {"name": "b", "namespace": "ns"},
                                    "spec": {"replicas": 3}})
    driver = Driver(cast(Runtime, None), "ns", "b")
    assert [(p.name, p.pods, p.leader, p.in_sync) for p in driver._placed(obj, broker)] == [
        ("orders/orders-0", ALL_T, 0, None), ("orders/orders-1", ALL_T, 1, None),
        ("orders/orders-2", ALL_T, 2, None)]  # not looked at this tick: from the status
    # As this tick's looks at the members left them (driver._observe):
    for i, synced in enumerate([ALL_T, ALL_T, (1, 2)]):
        key = f"orders/orders-{i}"
        driver.seen[key] = StreamState(key, ALL_T, i, frozenset(synced))
    placed = driver._placed(obj, broker)
    assert all(p.replicated for p in placed) and placed[2].in_sync == {1, 2}
    result = progress({0}, placed, 3, "b")
    assert not result.complete and [s for s, _ in result.transfers] == ["orders/orders-0"]

    # orders-2 has members 1 and 2 in sync only: pod 2 stopping would leave it one.
    pods = [PodState(0, "new"), PodState(1, "new"), PodState(2, "old")]
    step = next_step(pods, "new", list(driver.seen.values()), ALL, 3)
    assert step.action.value == "wait" and "orders/orders-2" in step.message, step
