"""The placement driver's pure decisions (streamlet_operator.failover), as tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamlet.replication.liveness import Contact
from streamlet.replication.model import Tail
from streamlet_operator.builders.directory import Placed, Replicated, render_directory
from streamlet_operator.failover import (
    AVAILABLE,
    DISCOVERING,
    ELECTING,
    ELECTING_CONDITION,
    READY,
    UNAVAILABLE,
    UNDER_REPLICATED,
    Replication,
    Step,
    Unit,
    choose,
    conditions,
    discovered,
    discovered_partition,
    force_rest,
    in_sync,
    members_of,
    next_step,
    parse_force,
    phase_of,
    record_of,
    record_patch,
    summarise,
    unclean_elsewhere,
    units,
    with_phase,
)

R3 = Replication(4, 1, (0, 1, 2), (0, 1, 2), READY, "Elected")
NONE = Replication(5, None, (0, 1, 2), (), UNAVAILABLE, "NoQuorum")


@pytest.mark.parametrize(("record", "misses", "up", "force", "step"), [
    (R3, {}, {0, 1, 2}, False, Step.NONE),
    (R3, {1: 2}, {0, 2}, False, Step.NONE),  # two misses: not yet suspected
    (R3, {1: 3}, {0, 2}, False, Step.ELECT),  # the leader missed three probes in a row
    (R3, {0: 9, 2: 9}, {1}, False, Step.NONE),  # followers down: the leader stays
    (R3, {}, {0, 1, 2}, True, Step.FORCE),  # the annotation asks, whatever the health
    (NONE, {}, {0, 1}, False, Step.ELECT),  # no leader and a majority answers: elect
    (NONE, {}, {0}, False, Step.NONE),  # no leader, no majority: wait, use no epoch
    (NONE, {}, {0, 3, 4}, False, Step.NONE),  # non-members answering count for nothing
    (NONE, {}, {0}, True, Step.FORCE),  # no majority, forced: the unclean path
])
def test_next_step(record: Replication, misses: dict[int, int], up: set[int], force: bool,
                   step: Step) -> None:
    assert next_step(record, misses, up, force) is step


@pytest.mark.parametrize(("draining", "up", "step"), [
    ({1}, {0, 1, 2}, Step.ELECT),  # the leader's pod is being deleted: move first
    ({1}, {1, 2}, Step.NONE),  # without it only one answers: it leads until it stops
    ({0}, {0, 1, 2}, Step.NONE),  # a follower's pod: nothing to move
    ({0, 1}, {0, 1, 2}, Step.NONE),  # two of three going: the leader stays while it can
])
def test_next_step_with_pods_being_deleted(draining: set[int], up: set[int], step: Step) -> None:
    assert next_step(R3, {}, up, False, draining) is step


T = Tail


@pytest.mark.parametrize(("answers", "draining", "leader", "unclean"), [
    # the draining leader holds the longest log (unconfirmed chunks): the others still win
    ({0: T(4, 10, 11), 1: T(4, 12, 13), 2: T(4, 10, 11)}, {1}, 0, False),
    ({0: T(4, 9, 10), 1: T(4, 12, 13), 2: T(4, 10, 11)}, {1}, 2, False),  # highest of the rest
    # without it no majority: all who answered, it included (the draining pod only ties)
    ({0: None, 1: T(4, 12, 13), 2: T(4, 10, 11)}, {1}, 1, False),
    ({0: T(4, 10, 11), 1: T(4, 10, 11), 2: None}, {0}, 1, False),  # a tie goes past it
    ({0: T(4, 10, 11), 1: T(4, 12, 13), 2: T(4, 10, 11)}, set(), 1, False),  # nothing draining
])
def test_choose(answers: dict[int, Tail | None], draining: set[int], leader: int,
                unclean: bool) -> None:
    decision = choose(R3, answers, draining=draining)
    assert (decision.leader, decision.unclean, decision.epoch) == (leader, unclean, R3.epoch + 1)


@pytest.mark.parametrize(("leader", "committed", "tails", "expected"), [
    (1, 10, {0: 10, 2: 12}, (0, 1, 2)),  # at or past the commit point
    (1, 10, {0: 9, 2: 10}, (1, 2)),  # 0 lacks a committed chunk
    (1, 10, {0: None, 2: None}, (1,)),  # unreachable followers
    (1, -1, {0: -1, 2: -1}, (0, 1, 2)),  # an empty stream: everyone holds all of it
    (0, 5, {0: 1, 1: 5}, (0, 1)),  # the leader's own tail is not asked
])
def test_in_sync(leader: int, committed: int, tails: dict[int, int | None],
                 expected: tuple[int, ...]) -> None:
    assert in_sync(leader, committed, tails) == expected


@pytest.mark.parametrize(("record", "synced", "phase"), [
    (R3, (0, 1, 2), READY),
    (R3, (1, 2), READY),  # 2 of 3: a quorum
    (R3, (1,), ELECTING),  # the leader alone cannot commit
    (Replication(2, 0, (0, 1, 2, 3, 4)), (0, 1), ELECTING),  # 2 of 5
    (Replication(2, 0, (0, 1, 2, 3, 4)), (0, 1, 4), READY),
    (NONE, (), UNAVAILABLE),
    (Replication(6, None, (0, 1, 2), phase=ELECTING), (), ELECTING),  # reserved, electing
])
def test_phase(record: Replication, synced: tuple[int, ...], phase: str) -> None:
    assert phase_of(record, synced) == phase
    assert with_phase(record, synced).in_sync == synced


@pytest.mark.parametrize(("leader", "holders", "replicas", "expected"), [
    (1, [0, 1, 2], 3, Replication(1, 1, (0, 1, 2), (), ELECTING, "Created")),
    (1, [2, 1], 2, Replication(1, 1, (1, 2), (), ELECTING, "Created")),
    (1, [0, 1], 3, None),  # a copy does not answer: wait for all
    (0, [1, 2, 3], 3, None),  # the Create's pod holds none: not this stream's record
])
def test_discovered(leader: int, holders: list[int], replicas: int,
                    expected: Replication | None) -> None:
    assert discovered(leader, holders, replicas) == expected


@pytest.mark.parametrize(("value", "ordinal", "refused"), [
    (None, None, False),
    ("2", 2, False),
    (" 0 ", 0, False),
    ("7", None, True),  # not a member
    ("b-1", None, True),  # a pod name, not an ordinal
    ("", None, True),
])
def test_parse_force(value: str | None, ordinal: int | None, refused: bool) -> None:
    got, why = parse_force(value, (0, 1, 2))
    assert got == ordinal and (why is not None) is refused


@pytest.mark.parametrize(("value", "partition", "ordinal", "refused", "rest"), [
    ("1", "s-0", 1, False, None),  # an ordinal: every partition, removed after the first
    ("s-0=1", "s-0", 1, False, None),
    ("s-0=1, s-2=0", "s-2", 0, False, "s-0=1"),  # only its entry goes
    ("s-0=1,s-2=0", "s-1", None, False, "s-0=1,s-2=0"),  # not named: nothing to force
    ("s-0=7,s-2=0", "s-0", None, True, "s-2=0"),  # not a member: refused, its entry dropped
    ("s-0=x", "s-0", None, True, None),
    ("s-0=1,2", "s-0", None, True, None),  # mixed: unreadable, removed
    ("=1", "s-0", None, True, None),
    ("s-0=1", None, None, True, None),  # partitions named on a single stream
])
def test_parse_force_per_partition(value: str, partition: str | None, ordinal: int | None,
                                   refused: bool, rest: str | None) -> None:
    got, why = parse_force(value, (0, 1, 2), partition)
    assert got == ordinal and (why is not None) is refused, why
    assert force_rest(value, partition) == rest


def _table(record: Replication) -> dict[str, tuple[bool, str]]:
    return {t: (s, r) for t, s, r, _ in conditions(record, "b-1")}


def test_conditions() -> None:
    assert _table(R3) == {AVAILABLE: (True, "LeaderElected"),
                          ELECTING_CONDITION: (False, "LeaderElected"),
                          UNDER_REPLICATED: (False, "AllInSync")}
    lagging = Replication(4, 1, (0, 1, 2), (1, 2), READY, "Elected")
    assert _table(lagging)[UNDER_REPLICATED] == (True, "MembersBehind")
    assert _table(NONE) == {AVAILABLE: (False, "NoQuorum"),
                            ELECTING_CONDITION: (True, "NoQuorum"),
                            UNDER_REPLICATED: (True, "MembersBehind")}
    new = Replication(6, 2, (0, 1, 2), (2,), ELECTING, "Elected")
    assert _table(new)[AVAILABLE] == (False, "Electing")
    assert _table(new)[ELECTING_CONDITION] == (True, "Elected")


def test_status_round_trip() -> None:
    for record in (R3, NONE):
        assert Replication.from_status({"replication": record.to_dict()}) == record
    assert Replication.from_status({}) is None


def test_directory_names_a_replicated_stream_s_members() -> None:
    """The entry brokers read: epoch, leader, other members; no leader while electing."""
    address = {0: "h0:1", 1: "h1:1", 2: None}.get
    placed = [Placed("orders", 1, (("orders", 1),), Replicated(3, 1, (0, 1, 2))),
              Placed("audit", 1, (("audit", 0),), Replicated(4, None, (0, 1, 2))),
              Placed("plain", 1, (("plain", 0),))]
    streams = json.loads(render_directory(placed, address))["streams"]
    assert streams == {"orders": {"epoch": 3, "leader": "h1:1", "replicas": ["h0:1"]},
                       "audit": {"epoch": 4, "leader": None, "replicas": ["h0:1", "h1:1"]},
                       "plain": "h0:1"}


# --- a replicated super stream: one record per partition -----------------------------------

def _super(by_partition: dict[str, Any] | None, partitions: int = 3) -> dict[str, Any]:
    status: dict[str, Any] = {
        "applied": {"name": "s", "broker": "b", "partitions": partitions, "replicas": 3},
        "placement": [{"stream": f"s-{i}", "pod": "b-0", "ordinal": 0}
                      for i in range(partitions)]}
    if by_partition is not None:
        status["partitionReplication"] = by_partition
    return {"metadata": {"name": "res"}, "status": status}


def test_units_of_a_single_stream_and_of_a_super_stream() -> None:
    single: dict[str, Any] = {"metadata": {"name": "res"}, "status": {
        "applied": {"name": "s", "partitions": 1}, "replication": R3.to_dict()}}
    assert units(single) == [Unit("res", "s")]
    assert record_of(single["status"], Unit("res", "s")) == R3
    assert record_patch(Unit("res", "s"), R3) == {"replication": R3.to_dict()}
    obj = _super({"s-1": R3.to_dict()})
    assert [u.key for u in units(obj)] == ["res/s-0", "res/s-1", "res/s-2"]
    assert [record_of(obj["status"], u) for u in units(obj)] == [None, R3, None]
    assert record_patch(units(obj)[2], NONE) == {"partitionReplication": {"s-2": NONE.to_dict()}}


@pytest.mark.parametrize(("status", "members"), [
    pytest.param({"applied": {"partitions": 1}, "replication": R3.to_dict()}, (0, 1, 2),
                 id="single: its members"),
    pytest.param({"applied": {"partitions": 1}}, None, id="single, not discovered"),
    pytest.param(_super({f"s-{i}": Replication(1, i, (i, (i + 1) % 4), ()).to_dict()
                         for i in range(3)})["status"], (0, 1, 2, 3),
                 id="super: every partition's members"),
    pytest.param(_super({"s-0": R3.to_dict(), "s-1": R3.to_dict()})["status"], None,
                 id="super, a partition not discovered: every pod held"),
])
def test_members_of(status: dict[str, Any], members: tuple[int, ...] | None) -> None:
    assert members_of(status) == members


def _c(epoch: int, following: bool) -> Contact:
    return Contact(epoch, following, 0.1 if following else None)


@pytest.mark.parametrize(("contacts", "replicas", "expected"), [
    pytest.param({0: _c(1, True), 1: _c(1, False), 2: _c(1, True)}, 3,
                 Replication(1, 1, (0, 1, 2), (), ELECTING, "Created"), id="led by 1"),
    pytest.param({0: _c(1, True), 1: _c(1, False), 2: None}, 3, None,
                 id="a copy does not answer: wait"),
    pytest.param({0: _c(1, True), 2: _c(1, False)}, 2,
                 Replication(1, 2, (0, 2), (), ELECTING, "Created"), id="two of three pods"),
    pytest.param({0: _c(1, False), 1: _c(1, False), 2: _c(1, True)}, 3, None,
                 id="two not following (one not assigned yet): wait"),
    pytest.param({0: _c(1, True), 1: _c(1, True), 2: _c(1, True)}, 3, None,
                 id="no leader: wait"),
    pytest.param({0: _c(2, True), 1: _c(2, False), 2: _c(2, True)}, 3, None,
                 id="not epoch 1: someone elected, not a discovery"),
])
def test_discovered_partition(contacts: dict[int, Contact | None], replicas: int,
                              expected: Replication | None) -> None:
    assert discovered_partition(contacts, replicas) == expected


def _pod(ordinal: int) -> str:
    return f"b-{ordinal}"


READY0 = Replication(1, 0, (0, 1, 2), (0, 1, 2), READY, "Created")
BEHIND = Replication(2, 2, (0, 1, 2), (1, 2), READY, "Elected")


@pytest.mark.parametrize(("records", "expected"), [
    pytest.param({"s-0": READY0, "s-1": READY0},
                 {AVAILABLE: ("True", "LeaderElected", "s-0: b-0 leads epoch 1; s-1: b-0"),
                  ELECTING_CONDITION: ("False", "LeaderElected", "s-0: "),
                  UNDER_REPLICATED: ("False", "AllInSync", "s-1: 3 of 3")},
                 id="all ready"),
    pytest.param({"s-0": READY0, "s-1": NONE},
                 {AVAILABLE: ("False", "NoQuorum", "s-1: no leader in epoch 5"),
                  ELECTING_CONDITION: ("True", "NoQuorum", "s-1: epoch 5"),
                  UNDER_REPLICATED: ("True", "MembersBehind", "s-1: 0 of 3")},
                 id="one partition without a leader: named"),
    pytest.param({"s-0": READY0, "s-1": BEHIND},
                 {AVAILABLE: ("True", "LeaderElected", "s-1: b-2 leads epoch 2"),
                  ELECTING_CONDITION: ("False", "LeaderElected", ""),
                  UNDER_REPLICATED: ("True", "MembersBehind", "s-1: 2 of 3 members in sync")},
                 id="one partition under-replicated: named"),
    pytest.param({"s-0": READY0, "s-1": None},
                 {AVAILABLE: ("False", DISCOVERING, "s-1: members not known yet"),
                  ELECTING_CONDITION: ("True", DISCOVERING, "s-1: members not known yet"),
                  UNDER_REPLICATED: ("False", "AllInSync", "s-0: 3 of 3")},
                 id="one partition not discovered yet"),
])
def test_summarise(records: dict[str, Replication | None],
                   expected: dict[str, tuple[str, str, str]]) -> None:
    got = {t: ("True" if v else "False", r, m) for t, v, r, m in summarise(records, _pod)}
    assert set(got) == set(expected)
    for type_, (value, reason, words) in expected.items():
        assert got[type_][:2] == (value, reason), (type_, got[type_])
        assert words in got[type_][2], (type_, got[type_])
    bad = {t: m for t, (v, _, m) in got.items()
           if (v == "True") != (t == AVAILABLE)}  # the conditions that are not good
    for message in bad.values():  # only the partitions that are not good are named
        assert "s-0" not in message


def test_directory_names_each_replicated_partition_s_members() -> None:
    """A replicated super stream's partitions each get a replicated entry once known; one not
    known yet is left out (never named as one copy on the Create's pod)."""
    address = {0: "h0:1", 1: "h1:1", 2: "h2:1"}.get
    placed = Placed("s", 3, (("s-0", 1), ("s-1", 2), ("s-2", 0)), None, 3,
                    (("s-0", Replicated(1, 1, (0, 1, 2))), ("s-1", Replicated(2, 2, (0, 1, 2)))))
    doc = json.loads(render_directory([placed], address))
    assert doc["streams"] == {
        "s-0": {"epoch": 1, "leader": "h1:1", "replicas": ["h0:1", "h2:1"]},
        "s-1": {"epoch": 2, "leader": "h2:1", "replicas": ["h0:1", "h1:1"]}}
    assert doc["super_streams"]["s"]["partitions"] == ["s-0", "s-1", "s-2"]
    assert Placed.from_status(_super({"s-0": READY0.to_dict()})["status"]) == Placed(
        "s", 3, tuple((f"s-{i}", 0) for i in range(3)), None, 3,
        (("s-0", Replicated(1, 0, (0, 1, 2))),))


def test_unclean_elsewhere() -> None:
    unclean = Replication(6, 0, (0, 1, 2), (0,), READY, "UncleanElection")
    records = {"s-0": R3, "s-1": unclean, "s-2": None, "s-3": unclean}
    assert unclean_elsewhere(records, "s-0") == ["s-1", "s-3"]
    assert unclean_elsewhere(records, "s-1") == ["s-3"]  # its own clean election clears it
    assert unclean_elsewhere({"s-0": R3, "s-1": R3}, "s-0") == []


def test_the_directory_carries_the_pods_zones_when_known() -> None:
    assert "zones" not in json.loads(render_directory([], str))
    doc = json.loads(render_directory([], str, {0: "eu-1a", 2: "eu-1b"}))
    assert doc["zones"] == {"0": "eu-1a", "2": "eu-1b"}
