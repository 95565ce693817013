"""Elections as tables, and a randomized property: the elected tail is the highest fenced."""

from __future__ import annotations

import random

import pytest

from streamlet.replication import NO_LEADER, Tail, quorum
from streamlet.replication.election import Phase, Reason, elect, transfer, transfer_ready

T = Tail


@pytest.mark.parametrize(("n", "q"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_quorum(n: int, q: int) -> None:
    assert quorum(n) == q


def test_no_quorum_of_nothing() -> None:
    with pytest.raises(ValueError):
        quorum(0)
    with pytest.raises(ValueError):
        elect(set(), 1, {})


# (members, answers, expected leader); epoch 3 becomes 4
TABLE = [
    pytest.param({0}, {0: T(1, 5, 50)}, 0, id="rf1"),
    pytest.param({0, 1, 2}, {0: T(3, 10, 100), 1: T(3, 8, 80)}, 0, id="highest chunk id"),
    pytest.param({0, 1, 2}, {1: T(3, 8, 80), 2: T(3, 10, 100)}, 2, id="the old leader missing"),
    pytest.param({0, 1, 2}, {0: T(2, 5, 50), 1: T(1, 9, 90)}, 0,
                 id="epoch before chunk id (PR 3967)"),
    pytest.param({0, 1, 2}, {0: T(1, 9, 9000), 1: T(2, 3, 30)}, 1,
                 id="epoch before offset: never (offset, epoch)"),
    pytest.param({0, 1, 2}, {0: T(2, 7, 70), 1: T(2, 7, 70), 2: T(2, 6, 60)}, 0,
                 id="tie: lowest ordinal"),
    pytest.param({0, 1, 2}, {0: None, 1: T(2, 7, 70), 2: T(2, 9, 90)}, 2,
                 id="None does not count"),
    pytest.param({0, 1, 2}, {1: T(2, 7, 70), 2: T(2, 6, 60), 9: T(9, 99, 999)}, 1,
                 id="a non-member's answer ignored"),
    pytest.param({0, 1, 2, 3, 4}, {0: T(1, 1, 10), 3: T(2, 0, 5), 4: T(1, 4, 40)}, 3,
                 id="rf5: three of five"),
    pytest.param({0, 1, 2}, {0: T(0, -1, 0), 1: T(0, -1, 0)}, 0, id="empty logs"),
]


@pytest.mark.parametrize(("members", "answers", "leader"), TABLE)
def test_election_table(members: set[int], answers: dict[int, Tail | None], leader: int) -> None:
    d = elect(members, 3, answers)
    assert (d.leader, d.epoch, d.phase, d.reason, d.unclean) == (
        leader, 4, Phase.ELECTING, Reason.ELECTED, False)
    assert d.followers == tuple(sorted(set(members) - {leader}))
    assert d.tail == answers[leader]


@pytest.mark.parametrize(("members", "answers"), [
    pytest.param({0, 1, 2}, {}, id="none"),
    pytest.param({0, 1, 2}, {0: T(2, 7, 70)}, id="one of three"),
    pytest.param({0, 1, 2}, {0: T(2, 7, 70), 1: None, 2: None}, id="two silent"),
    pytest.param({0, 1}, {0: T(2, 7, 70)}, id="one of two"),
    pytest.param({0, 1, 2, 3, 4}, {0: T(1, 1, 1), 1: T(1, 1, 1)}, id="two of five"),
    pytest.param({0, 1, 2}, {0: T(1, 1, 1), 7: T(1, 1, 1), 8: T(1, 1, 1)},
                 id="non-members do not make a quorum"),
])
def test_no_election_without_a_fenced_majority(members: set[int], answers: dict[int, Tail | None]) -> None:
    d = elect(members, 3, answers)
    assert (d.leader, d.followers, d.phase, d.reason, d.epoch, d.unclean) == (
        NO_LEADER, (), Phase.UNAVAILABLE, Reason.NO_QUORUM, 4, False)


TIES = {0: T(2, 7, 70), 1: T(2, 7, 70), 2: T(2, 7, 70)}


@pytest.mark.parametrize(("kwargs", "leader"), [
    pytest.param({}, 0, id="lowest ordinal"),
    pytest.param({"preferred": 2}, 2, id="preferred"),
    pytest.param({"preferred": 2, "in_sync": {0, 1}, "draining": {2}, "leading": {2: 9}}, 2,
                 id="preferred before everything"),
    pytest.param({"in_sync": {1, 2}}, 1, id="in sync"),
    pytest.param({"in_sync": {1}, "draining": {1}}, 1, id="in sync before not draining"),
    pytest.param({"draining": {0}}, 1, id="not draining"),
    pytest.param({"draining": {0}, "leading": {1: 5, 2: 1}}, 2, id="not draining before fewest"),
    pytest.param({"leading": {0: 3, 1: 2, 2: 2}}, 1, id="fewest led, then lowest ordinal"),
    pytest.param({"preferred": 9}, 0, id="preferred non-member: no effect"),
])
def test_tie_breaks(kwargs: dict[str, object], leader: int) -> None:
    assert elect({0, 1, 2}, 3, TIES, **kwargs).leader == leader  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [
    {"preferred": 2}, {"in_sync": {2}}, {"draining": {0, 1}}, {"leading": {0: 100, 1: 100}},
    {"preferred": 2, "in_sync": {2}, "draining": {0, 1}, "leading": {0: 9, 1: 9}},
])
def test_a_lagging_member_is_never_elected(kwargs: dict[str, object]) -> None:
    answers = {0: T(2, 7, 70), 1: T(2, 7, 70), 2: T(2, 6, 69)}
    assert elect({0, 1, 2}, 3, answers, **kwargs).leader in (0, 1)  # type: ignore[arg-type]


def test_forced_election_without_a_majority_is_unclean() -> None:
    answers = {0: None, 1: T(2, 3, 30), 2: None}
    assert elect({0, 1, 2}, 3, answers).leader == NO_LEADER
    d = elect({0, 1, 2}, 3, answers, force=True)
    assert (d.leader, d.followers, d.unclean, d.reason, d.phase, d.epoch) == (
        1, (0, 2), True, Reason.UNCLEAN, Phase.ELECTING, 4)


def test_forced_elects_the_highest_survivor() -> None:
    members = {0, 1, 2, 3, 4}
    answers = {1: T(1, 9, 90), 3: T(2, 3, 30)}
    assert elect(members, 3, answers, force=True, preferred=1).leader == 3


def test_forced_with_a_majority_is_a_clean_election() -> None:
    d = elect({0, 1, 2}, 3, {0: T(2, 3, 30), 1: T(2, 4, 40)}, force=True)
    assert (d.leader, d.unclean, d.reason) == (1, False, Reason.ELECTED)


def test_forced_with_no_survivor_is_unavailable() -> None:
    d = elect({0, 1, 2}, 3, {0: None}, force=True)
    assert (d.leader, d.phase, d.reason, d.unclean) == (NO_LEADER, Phase.UNAVAILABLE,
                                                        Reason.NO_SURVIVOR, False)


@pytest.mark.parametrize(("leader", "target", "ready"), [
    (T(2, 7, 70), T(2, 7, 70), True),
    (T(2, 7, 70), T(2, 6, 60), False),
    (T(2, 7, 70), T(1, 7, 70), False),
    (T(2, 7, 70), None, False),
])
def test_transfer_ready(leader: Tail, target: Tail | None, ready: bool) -> None:
    assert transfer_ready(leader, target) is ready


def test_transfer_to_a_caught_up_target() -> None:
    answers = {0: T(2, 7, 70), 1: T(2, 7, 70), 2: T(2, 7, 70)}
    d = transfer({0, 1, 2}, 2, 2, answers, leading={2: 50})
    assert (d.leader, d.followers, d.reason, d.epoch, d.unclean) == (
        2, (0, 1), Reason.TRANSFERRED, 3, False)


def test_transfer_to_a_lagging_target_elects_the_highest() -> None:
    answers = {0: T(2, 7, 70), 1: T(2, 7, 70), 2: T(2, 6, 60)}
    d = transfer({0, 1, 2}, 2, 2, answers, draining={0})
    assert (d.leader, d.reason) == (1, Reason.TRANSFER_TARGET_BEHIND)


def test_transfer_needs_a_fenced_majority_and_a_member_target() -> None:
    d = transfer({0, 1, 2}, 2, 1, {1: T(2, 7, 70)})
    assert (d.leader, d.reason) == (NO_LEADER, Reason.NO_QUORUM)
    with pytest.raises(ValueError, match="not a member"):
        transfer({0, 1, 2}, 2, 5, {})


@pytest.mark.parametrize("seed", range(8))
def test_random_fences_elect_the_highest_tail(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        n = rng.randint(1, 7)
        members = set(rng.sample(range(10), n))
        answers: dict[int, Tail | None] = {}
        for m in members | {rng.randrange(10, 12)}:  # and a non-member now and then
            if rng.random() < 0.3:
                answers[m] = None
            elif rng.random() < 0.9:
                # few epochs and ids, so ties and (offset, epoch) inversions are common
                answers[m] = T(rng.randint(0, 3), rng.randint(-1, 4), rng.randint(0, 60))
        fenced = {m: t for m, t in answers.items() if m in members and t is not None}
        preferred = rng.choice(sorted(members))
        force = rng.random() < 0.2
        d = elect(members, 5, answers, preferred=preferred, force=force,
                  in_sync=set(rng.sample(sorted(members), rng.randint(0, n))),
                  draining=set(rng.sample(sorted(members), rng.randint(0, n))),
                  leading={m: rng.randint(0, 3) for m in members})
        assert d.epoch == 6
        if len(fenced) < quorum(n) and not (force and fenced):
            assert (d.leader, d.phase) == (NO_LEADER, Phase.UNAVAILABLE)
            continue
        assert d.unclean == (len(fenced) < quorum(n))
        assert d.leader in fenced
        won = fenced[d.leader].key()
        assert all(won >= t.key() for t in fenced.values())
        assert set(d.followers) == members - {d.leader}
        if preferred in fenced:  # preferred wins exactly when it holds the highest tail
            assert (d.leader == preferred) == (fenced[preferred].key() == won)
