"""Member set changes as tables: when a change may start, what to change next, when a learner
may join, rebalancing; and a model of a change with the leader or the new member crashing at
every step, which must never lose a committed chunk."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from streamlet.replication.commit import committed
from streamlet.replication.election import elect
from streamlet.replication.liveness import Contact
from streamlet.replication.membership import (
    Action,
    Change,
    Kind,
    Led,
    caught_up,
    change_refusal,
    change_step,
    lost_since,
    next_change,
    preferred_moves,
    rebalance,
)
from streamlet.replication.model import NO_LEADER, EpochAck, Tail, quorum
from streamlet.replication.placement import Load, Pod

ADD, REMOVE = Kind.ADD, Kind.REMOVE

# (members, leader, in_sync, change, changing, refused because ... / None)
REFUSALS = [
    pytest.param([0, 1, 2], 0, {0, 1, 2}, Change(ADD, 3), None, None, id="add to a settled rf3"),
    pytest.param([0, 1, 2], 0, {0, 1}, Change(ADD, 3), None, None,
                 id="add beside a lost member: 3 of 4 in sync"),
    pytest.param([0, 1, 2], 0, {0}, Change(ADD, 3), None, "fewer than a majority (2)",
                 id="not settled: 1 of 3 in sync"),
    pytest.param([0, 1], 0, {0}, Change(ADD, 2), None, "fewer than a majority (2)",
                 id="rf2 with its follower lost cannot commit a change"),
    pytest.param([0], 0, set(), Change(ADD, 1), None, None, id="rf1 to rf2: the leader alone"),
    pytest.param([0, 1, 2], NO_LEADER, {1, 2}, Change(ADD, 3), None, "no leader",
                 id="no leader"),
    pytest.param([0, 1, 2], 0, {0, 1, 2}, Change(ADD, 1), None, "already a member",
                 id="add a member"),
    pytest.param([0, 1, 2], 0, {0, 1, 2}, Change(ADD, 3), Change(ADD, 4), "one at a time",
                 id="one change at a time"),
    pytest.param([0, 1, 2], 0, {0, 1, 2}, Change(REMOVE, 2), None, None, id="remove a follower"),
    pytest.param([0, 1, 2, 3], 0, {0, 1, 3}, Change(REMOVE, 2), None, None,
                 id="remove the lost member after its replacement joined"),
    pytest.param([0, 1, 2, 3], 0, {0, 1, 3}, Change(REMOVE, 3), None, None,
                 id="remove an in-sync member: 2 of 3 left in sync"),
    pytest.param([0, 1, 2], 0, {0, 1}, Change(REMOVE, 1), None, "would leave 1 of 2",
                 id="removing an in-sync member leaves 1 of 2"),
    pytest.param([0, 1, 2], 0, {0, 1, 2}, Change(REMOVE, 0), None, "transfer its leadership",
                 id="the leader is transferred first"),
    pytest.param([0], 0, {0}, Change(REMOVE, 0), None, "the last member", id="the last member"),
    pytest.param([0, 1, 2], 0, {0, 1, 2}, Change(REMOVE, 5), None, "not a member",
                 id="remove a stranger"),
    pytest.param([0, 1, 2, 3, 4], 0, {0, 1, 2}, Change(REMOVE, 1), None, "would leave 2 of 4",
                 id="rf5 with two lost: removing an in-sync one leaves 2 of 4"),
    pytest.param([0, 1, 2, 3, 4], 0, {0, 1, 2}, Change(REMOVE, 4), None, None,
                 id="rf5 with two lost: removing a lost one leaves 3 of 4"),
]


@pytest.mark.parametrize(("members", "leader", "in_sync", "change", "changing", "refused"),
                         REFUSALS)
def test_change_refusal(members: list[int], leader: int, in_sync: set[int], change: Change,
                        changing: Change | None, refused: str | None) -> None:
    why = change_refusal(members, leader, in_sync, change, changing)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why


def test_change_applies_in_order() -> None:
    assert Change(ADD, 3).apply([2, 0, 1]) == (0, 1, 2, 3)
    assert Change(REMOVE, 1).apply([0, 1, 2]) == (0, 2)
    assert str(Change(REMOVE, 1)) == "remove member 1"


def pods(n: int, zones: str = "", draining: set[int] | None = None,
         down: set[int] | None = None) -> list[Pod]:
    return [Pod(i, zones[i] if zones else None, i in (draining or set()),
                i not in (down or set())) for i in range(n)]


# (desired, members, leader, pods, load hosted, lost, expected change or None, why contains)
NEXT = [
    pytest.param(3, [0, 1, 2], 0, pods(4), {}, set(), None, "every one healthy",
                 id="nothing to do"),
    pytest.param(3, [0, 1, 2], 0, pods(4, down={2}), {}, {2}, Change(ADD, 3), "replacing member 2",
                 id="a lost member is replaced first"),
    pytest.param(3, [0, 1, 2, 3], 0, pods(4, down={2}), {}, {2}, Change(REMOVE, 2),
                 "member 2 is lost", id="then the lost member leaves"),
    pytest.param(3, [0, 1, 2], 0, pods(3, down={2}), {}, {2}, None, "no pod can take",
                 id="no pod to replace it on"),
    pytest.param(3, [0, 1, 2], 0, pods(5, down={3}), {4: 7}, {2}, Change(ADD, 4), "replacing",
                 id="a pod that is not ready takes nothing"),
    pytest.param(3, [0, 1, 2], 0, pods(5), {3: 9, 4: 1}, {2}, Change(ADD, 4), "replacing",
                 id="the pod holding the fewest streams"),
    pytest.param(3, [0, 1, 2], 0, pods(5, zones="abbbc"), {}, {2}, Change(ADD, 4), "replacing",
                 id="the zone holding none of the stream's healthy members"),
    pytest.param(3, [0, 1, 2], 0, pods(5, zones="abcab"), {}, {2}, Change(ADD, 3), "replacing",
                 id="zones a and b hold one each: lowest ordinal"),
    pytest.param(5, [0, 1, 2], 0, pods(5), {}, set(), Change(ADD, 3), "3 members, 5 wanted",
                 id="grow"),
    pytest.param(1, [0, 1, 2], 0, pods(3), {}, set(), Change(REMOVE, 2), "3 members, 1 wanted",
                 id="shrink: the highest follower first"),
    pytest.param(1, [0, 1], 1, pods(3), {}, set(), Change(REMOVE, 0), "2 members, 1 wanted",
                 id="shrink: never the leader while a follower is left"),
    pytest.param(2, [0, 1, 2], 0, pods(3, zones="aab"), {}, set(), Change(REMOVE, 1),
                 "wanted", id="shrink: from the zone holding the most"),
    pytest.param(3, [0, 1, 2], 0, pods(4, draining={1}), {}, set(), Change(ADD, 3),
                 "replacing member 1", id="a draining pod's member is moved: added first"),
    pytest.param(3, [0, 2, 3, 1], 0, pods(4, draining={1}), {}, set(), Change(REMOVE, 1),
                 "on a pod being removed", id="then removed"),
    pytest.param(3, [0, 1, 2], 0, pods(3, draining={2}), {}, set(), None, "no pod can take",
                 id="scale-down blocked: no pod left to move to"),
    pytest.param(1, [0], 0, pods(2, draining={0}), {}, set(), Change(ADD, 1), "replacing member 0",
                 id="rf1 on a draining pod gets a second member"),
    pytest.param(1, [0, 1], 0, pods(2, draining={0}), {}, set(), Change(REMOVE, 0),
                 "on a pod being removed", id="then the leader leaves: transfer first"),
]


@pytest.mark.parametrize(("desired", "members", "leader", "pod_list", "hosted", "lost",
                          "expected", "why"), NEXT)
def test_next_change(desired: int, members: list[int], leader: int, pod_list: list[Pod],
                     hosted: dict[int, int], lost: set[int], expected: Change | None,
                     why: str) -> None:
    step = next_change(desired, members, leader, pod_list, Load(hosted=hosted), lost)
    assert step.change == expected
    assert why in step.why


def test_next_change_needs_a_member() -> None:
    with pytest.raises(ValueError, match="at least one member"):
        next_change(0, [0], 0, pods(1), Load())


@pytest.mark.parametrize(("target", "learner", "expected"), [
    (5, Tail(2, 5, 100), True), (5, Tail(2, 9, 300), True), (5, Tail(2, 4, 90), False),
    (5, None, False), (-1, Tail(0, -1, 0), True)])
def test_caught_up(target: int, learner: Tail | None, expected: bool) -> None:
    assert caught_up(target, learner) is expected


def led(leader: int, members: tuple[int, ...] = (0, 1, 2), in_sync: frozenset[int] | None = None
        ) -> Led:
    return Led(leader, members, frozenset(members) if in_sync is None else in_sync)


@pytest.mark.parametrize(("streams", "pod_list", "moves"), [
    pytest.param({"a": led(0), "b": led(0), "c": led(0)}, [0, 1, 2], [("a", 1), ("b", 2)],
                 id="three on one pod: one each"),
    pytest.param({"a": led(0), "b": led(1), "c": led(2)}, [0, 1, 2], [], id="already even"),
    pytest.param({"a": led(0), "b": led(0)}, [0, 1, 2], [("a", 1)], id="two on one: 1-1-0"),
    pytest.param({"a": led(0, in_sync=frozenset({0})), "b": led(0, in_sync=frozenset({0}))},
                 [0, 1, 2], [], id="nobody in sync: nothing moves"),
    pytest.param({"a": led(0, (0, 1)), "b": led(0, (0, 1)), "c": led(0, (0, 1))}, [0, 1, 2],
                 [("a", 1)], id="only members can lead"),
    pytest.param({f"s{i}": led(0) for i in range(6)}, [0, 1, 2],
                 [("s0", 1), ("s1", 2), ("s2", 1), ("s3", 2)], id="six: two each"),
])
def test_rebalance(streams: dict[str, Led], pod_list: list[int],
                   moves: list[tuple[str, int]]) -> None:
    assert rebalance(streams, pod_list) == moves


def test_preferred_moves() -> None:
    streams = {"a": led(1), "b": led(0), "c": led(1, in_sync=frozenset({1, 2})),
               "d": led(2, (1, 2))}
    assert preferred_moves(streams, {"a": 0, "b": 0, "c": 0, "d": 0}) == [("a", 0)]


# --- quorum overlap: why one change at a time is safe -----------------------------------------


@pytest.mark.parametrize("n", range(1, 8))
def test_every_majority_of_the_old_set_meets_every_majority_of_the_new(n: int) -> None:
    """A single add or remove: any majority of the old set and any majority of the new set
    share a member, so a chunk committed under either is held by a member any election of the
    other counts (Raft's single-server change, Ongaro's thesis §4.1)."""
    old = set(range(n))
    for new in (old | {n}, *(old - {m} for m in old if n > 1)):
        for a in itertools.combinations(sorted(old), quorum(len(old))):
            for b in itertools.combinations(sorted(new), quorum(len(new))):
                assert set(a) & set(b), (old, new, a, b)


def test_a_two_member_jump_is_what_this_forbids() -> None:
    """Adding two members at once breaks the overlap: {0,1,2} -> {0,1,2,3,4}."""
    assert not ({0, 1} & {2, 3, 4})


# --- a change with a crash at every step ------------------------------------------------------


@dataclass
class Model:
    """Members' logs as lists of chunk epochs (the index is the chunk id), a driver record
    (epoch, members), and the chunks known to be committed, as the rules of this package say."""

    members: tuple[int, ...]
    leader: int
    epoch: int
    logs: dict[int, list[int]]
    member_epoch: dict[int, int]
    acks: dict[int, EpochAck] = field(default_factory=dict)
    commit: int = -1
    epoch_start: int | None = None
    down: set[int] = field(default_factory=set)
    committed_chunks: list[tuple[int, int]] = field(default_factory=list)

    def tail(self, m: int) -> Tail:
        log = self.logs.get(m, [])
        return Tail(log[-1] if log else 0, len(log) - 1, len(log))

    def publish(self) -> None:
        """The leader writes a chunk, every member up and in this epoch copies the leader's
        log and acks, and the leader commits by the commit rule."""
        if self.leader in self.down or self.leader == NO_LEADER:
            return
        self.logs[self.leader].append(self.epoch)
        self.replicate()

    def replicate(self) -> None:
        if self.leader == NO_LEADER:
            return
        lead = self.logs[self.leader]
        for m, e in self.member_epoch.items():
            if m == self.leader or m in self.down or e != self.epoch:
                continue
            self.logs[m] = list(lead)  # truncate to the leader's, then copy
            self.acks[m] = EpochAck(m, self.epoch, len(lead) - 1)
        now = committed(self.epoch, self.leader, len(lead) - 1, list(self.acks.values()),
                        self.members, self.epoch_start, self.commit)
        for c in range(self.commit + 1, now + 1):
            self.committed_chunks.append((c, lead[c]))
        self.commit = max(self.commit, now)

    def assign(self, m: int, epoch: int, members: tuple[int, ...]) -> None:
        if m in self.down:
            return
        self.member_epoch[m] = epoch
        if m == self.leader:
            self.epoch, self.members, self.acks = epoch, members, {}
            self.logs[m].append(epoch)  # the epoch-start chunk
            self.epoch_start = len(self.logs[m]) - 1
        self.replicate()

    def elect(self) -> None:
        """The driver's election over its record: fence every member up, elect, assign."""
        new = max(self.member_epoch.values()) + 1
        answers = {m: (None if m in self.down else self.tail(m)) for m in self.members}
        decision = elect(list(self.members), new - 1, answers)
        self.leader = decision.leader
        if decision.leader == NO_LEADER:
            return
        self.member_epoch[self.leader] = new
        self.epoch, self.acks, self.commit = new, {}, self.commit
        self.logs[self.leader].append(new)
        self.epoch_start = len(self.logs[self.leader]) - 1
        for m in decision.followers:
            if m not in self.down:
                self.member_epoch[m] = new
        self.replicate()

    def lost_nothing(self) -> None:
        for m in self.members:
            if m in self.down:
                continue
            # every member up and following holds a prefix of the leader's log
            assert self.logs[m] == self.logs[self.leader][:len(self.logs[m])] or \
                self.member_epoch[m] != self.epoch
        lead = self.logs[self.leader]
        for c, e in self.committed_chunks:
            assert c < len(lead) and lead[c] == e, (c, e, lead)


def change_steps(model: Model, change: Change) -> list[object]:
    """The driver's steps of ``change``, each a callable, in order."""
    old = model.members
    new = change.apply(old)
    e = model.epoch + 1
    x = change.member

    def learn() -> None:  # the learner follows the current epoch, not counted
        if change.kind is ADD and x not in model.down:
            model.logs.setdefault(x, [])
            model.member_epoch[x] = model.epoch
            model.replicate()

    undone: list[str] = []

    def record() -> None:  # the driver checks the change, then records epoch e with the new set
        synced = {m for m in old if m not in model.down and model.member_epoch.get(m) == model.epoch}
        leader = model.leader if model.leader not in model.down else NO_LEADER
        why = change_refusal(old, leader, synced, change)
        if why is None and change.kind is ADD and (x in model.down or not caught_up(
                len(model.logs[model.leader]) - 2, model.tail(x))):
            why = f"member {x} did not catch up"
        if why is not None:
            undone.append(why)
        else:
            model.members = new

    def assign(m: int) -> None:
        if not undone and model.leader != NO_LEADER:
            model.assign(m, e, new)

    steps: list[object] = [learn, model.publish, record]
    order = [model.leader] + [m for m in new if m != model.leader]
    steps += [lambda m=m: assign(m) for m in order]
    return steps


@pytest.mark.parametrize("victim", ["leader", "new member", "a follower"])
@pytest.mark.parametrize("change", [Change(ADD, 3), Change(REMOVE, 2)], ids=str)
def test_a_crash_at_every_step_of_a_change_loses_no_committed_chunk(victim: str,
                                                                   change: Change) -> None:
    for crash_at in range(8):
        model = Model((0, 1, 2), 0, 1, {0: [1], 1: [1], 2: [1]}, {0: 1, 1: 1, 2: 1},
                      epoch_start=0)
        model.replicate()
        for _ in range(3):
            model.publish()
        for i, step in enumerate(change_steps(model, change)):
            if i == crash_at:
                who = {"leader": model.leader, "new member": change.member,
                       "a follower": 1}[victim]
                model.down.add(who)
                if who == model.leader:
                    model.elect()
            step()  # type: ignore[operator]
            model.publish()
        if model.leader in model.down or model.leader == NO_LEADER:
            model.elect()
        up = set(model.members) - model.down
        if model.leader == NO_LEADER:  # no leader only without a majority of the recorded set
            assert len(up) < quorum(len(model.members)), (victim, crash_at, model)
        if model.leader != NO_LEADER:
            model.publish()
            model.lost_nothing()
        model.down.clear()  # the crashed member comes back; a new election counts it
        model.elect()
        model.publish()
        assert model.leader != NO_LEADER
        model.lost_nothing()
        # the change completed or was undone: the record is one set, old or new
        assert model.members in ((0, 1, 2), change.apply((0, 1, 2)))


# --- a change's next step ---------------------------------------------------------------------

FOLLOWING = Contact(4, True, 0.1, Tail(4, 9, 100))


@pytest.mark.parametrize(("change", "leader", "in_sync", "learner", "waited", "action", "why"), [
    pytest.param(Change(ADD, 3), 0, {0, 1, 2}, None, 0, Action.LEARN, "learns from member 0",
                 id="add: make the learner"),
    pytest.param(Change(ADD, 3), 0, {0, 1, 2}, Contact(3, True, 0.1, Tail(3, 9, 9)), 0,
                 Action.LEARN, "learns", id="add: a learner of an older epoch learns again"),
    pytest.param(Change(ADD, 3), 0, {0, 1, 2}, Contact(4, True, 0.1, Tail(4, 5, 50)), 1,
                 Action.WAIT, "chunk 5 of 9", id="add: catching up"),
    pytest.param(Change(ADD, 3), 0, {0, 1, 2}, FOLLOWING, 1, Action.JOIN,
                 "members [0, 1, 2, 3] in epoch 5", id="add: caught up, joins"),
    pytest.param(Change(ADD, 3), 0, {0, 1, 2}, Contact(4, True, 0.1, Tail(4, 5, 50)), 61,
                 Action.ABORT, "chunk 5 of 9", id="add: too slow, given up"),
    pytest.param(Change(ADD, 3), 0, {0, 1, 2}, None, 61, Action.ABORT, "did not follow",
                 id="add: the new member crashed"),
    pytest.param(Change(ADD, 3), NO_LEADER, {1, 2}, FOLLOWING, 1, Action.WAIT, "no leader",
                 id="add: the leader crashed"),
    pytest.param(Change(ADD, 3), 0, {0}, FOLLOWING, 1, Action.WAIT, "fewer than a majority",
                 id="add: caught up, but the stream is not settled"),
    pytest.param(Change(REMOVE, 2), 0, {0, 1, 2}, None, 0, Action.JOIN, "members [0, 1]",
                 id="remove a follower"),
    pytest.param(Change(REMOVE, 0), 0, {0, 1, 2}, None, 0, Action.TRANSFER, "transferred first",
                 id="remove the leader: transfer first"),
    pytest.param(Change(REMOVE, 0), 0, {0}, None, 0, Action.WAIT, "no other member is in sync",
                 id="remove the leader with nobody in sync"),
    pytest.param(Change(REMOVE, 1), 0, {0, 1}, None, 0, Action.WAIT, "would leave 1 of 2",
                 id="remove: not while it leaves no majority in sync"),
])
def test_change_step(change: Change, leader: int, in_sync: set[int], learner: Contact | None,
                     waited: float, action: Action, why: str) -> None:
    step = change_step(change, 4, [0, 1, 2], leader, in_sync, learner, 9, waited, 60)
    assert step.action is action
    assert why in step.why
    if action is Action.TRANSFER:
        assert step.to == 1


@pytest.mark.parametrize(("since", "now", "after", "expected"), [
    pytest.param({1: 10.0, 2: 14.0}, 15.0, 5.0, {1}, id="one unready long enough"),
    pytest.param({1: 10.0}, 14.9, 5.0, set(), id="not yet"),
    pytest.param({1: 0.0}, 1e6, 0.0, set(), id="replaceAfter 0: never"),
])
def test_lost_since(since: dict[int, float], now: float, after: float,
                    expected: set[int]) -> None:
    assert lost_since(since, now, after) == expected
