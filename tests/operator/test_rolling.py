"""The roll's decisions (rolling.py), as tables: which pod next, whether it may stop now, where
its leaderships go first."""

from __future__ import annotations

import pytest

from streamlet_operator.rolling import (
    Action,
    PodState,
    StreamState,
    next_step,
    outdated,
    roll_order,
    transfer_target,
)

NEW, OLD = "new", "old"


def pods(*revisions: str | None, down: int | None = None,
         terminating: int | None = None) -> list[PodState]:
    return [PodState(i, r, ready=i != down, terminating=i == terminating)
            for i, r in enumerate(revisions)]


def s(name: str, members: tuple[int, ...], leader: int | None,
      in_sync: tuple[int, ...] | None) -> StreamState:
    return StreamState(name, members, leader,
                       None if in_sync is None else frozenset(in_sync))


ALL = (0, 1, 2)


@pytest.mark.parametrize("revisions,revision,expected", [
    ((NEW, NEW, NEW), NEW, []),
    ((OLD, NEW, OLD), NEW, [0, 2]),
    ((None, NEW), NEW, [0]),  # a pod made before the hash existed
    ((OLD, OLD), None, []),  # a StatefulSet without the hash: nothing to roll
])
def test_outdated(revisions: tuple[str | None, ...], revision: str | None,
                  expected: list[int]) -> None:
    assert outdated(pods(*revisions), revision) == expected


@pytest.mark.parametrize("candidates,streams,expected", [
    ([0, 1, 2], [], [2, 1, 0]),  # no leaders: the highest ordinal first
    ([0, 1, 2], [s("a", ALL, 2, ALL)], [1, 0, 2]),  # the leader last
    ([0, 1, 2], [s("a", ALL, 0, ALL), s("b", ALL, 0, ALL), s("c", ALL, 1, ALL)], [2, 1, 0]),
    ([0, 1], [s("a", ALL, 2, ALL)], [1, 0]),  # a pod already rolled is no candidate
])
def test_roll_order(candidates: list[int], streams: list[StreamState],
                    expected: list[int]) -> None:
    assert roll_order(candidates, streams) == expected


@pytest.mark.parametrize("stream,pod,stale,led,expected", [
    (s("a", ALL, 0, ALL), 0, [0, 1], {}, 2),  # a pod already rolled first
    (s("a", ALL, 0, ALL), 0, [0], {1: 3, 2: 1}, 2),  # then the one leading fewer
    (s("a", ALL, 0, ALL), 0, [0], {}, 1),  # then the lowest ordinal
    (s("a", ALL, 0, (0, 1)), 0, [0, 1], {}, 1),  # only in-sync members
    (s("a", ALL, 0, (0,)), 0, [0], {}, None),  # nobody in sync
    (s("a", (0, 1, 2, 3, 4), 3, (3, 4, 0)), 3, [3, 4], {}, 0),
])
def test_transfer_target(stream: StreamState, pod: int, stale: list[int], led: dict[int, int],
                         expected: int | None) -> None:
    assert transfer_target(stream, pod, stale, led) == expected


STEPS = [
    # (pods, streams, pods answering probes (None: not probed), action, pod, reason, transfers)
    ("up to date", pods(NEW, NEW, NEW), [s("a", ALL, 0, ALL)],
     None, Action.IDLE, None, "UpToDate", ()),
    ("a follower first", pods(OLD, OLD, OLD), [s("a", ALL, 0, ALL)],
     None, Action.DELETE, 2, "RestartingPod", ()),
    ("no replicated streams", pods(OLD, NEW, NEW), [], None, Action.DELETE, 0, "RestartingPod",
     ()),
    ("a pod down: never two", pods(OLD, NEW, OLD, down=1), [s("a", ALL, 0, ALL)],
     None, Action.WAIT, 1, "WaitingForPod", ()),
    ("a pod being deleted", pods(OLD, OLD, NEW, terminating=2), [],
     None, Action.WAIT, 2, "WaitingForPod", ()),
    ("a pod deleted and not made again yet (3 replicas)", pods(OLD, NEW)[:1] + [
        PodState(2, NEW)], [], None, Action.WAIT, 1, "WaitingForPod", ()),
    ("a pod whose broker does not answer (ready as its Pod says)", pods(OLD, OLD, OLD),
     [s("a", ALL, 0, (0, 2))], {0, 2}, Action.WAIT, 1, "WaitingForPod", ()),
    ("the pod just rolled not in sync yet: stopping another breaks the quorum",
     pods(OLD, OLD, NEW), [s("a", ALL, 0, (0, 1))],
     None, Action.WAIT, 1, "WaitingForQuorum", ()),
    ("a lagging member on a pod not rolled: the next pod would break the quorum",
     pods(OLD, OLD, OLD), [s("a", ALL, 0, (0, 2))],
     None, Action.WAIT, 2, "WaitingForQuorum", ()),
    ("five members, one behind: the quorum holds, but the roll waits for it",
     pods(OLD, OLD, OLD, OLD, OLD), [s("a", (0, 1, 2, 3, 4), 0, (0, 1, 2, 3))],
     None, Action.WAIT, 4, "WaitingForSync", ()),
    ("two members, one behind (tolerates no failure): waits for it",
     pods(OLD, OLD, NEW), [s("a", (1, 2), 1, (1,))],
     None, Action.WAIT, 0, "WaitingForSync", ()),
    ("a stream just elected or not yet discovered: wait a tick",
     pods(OLD, OLD, OLD), [s("a", ALL, 0, None)],
     None, Action.WAIT, 2, "WaitingForSync", ()),
    ("a stream with no leader and no quorum is not waited on",
     pods(OLD, NEW, NEW), [s("a", ALL, None, ())],
     None, Action.DELETE, 0, "RestartingPod", ()),
    ("the last pod leads: its leaderships go to rolled pods, spread",
     pods(OLD, NEW, NEW), [s("a", ALL, 0, ALL), s("b", ALL, 0, ALL), s("c", ALL, 1, ALL)],
     None, Action.TRANSFER, 0, "TransferringLeadership", (("a", 2), ("b", 1))),
    ("every pod leads: the one leading fewest moves first, to the lowest",
     pods(OLD, OLD, OLD), [s("a", ALL, 0, ALL), s("b", ALL, 1, ALL), s("c", ALL, 1, ALL),
                           s("d", ALL, 2, ALL), s("e", ALL, 2, ALL)],
     None, Action.TRANSFER, 0, "TransferringLeadership", (("a", 1),)),
]


@pytest.mark.parametrize("pod_states,streams,answering,action,pod,reason,transfers",
                         [row[1:] for row in STEPS], ids=[row[0] for row in STEPS])
def test_next_step(pod_states: list[PodState], streams: list[StreamState],
                   answering: set[int] | None, action: Action, pod: int | None, reason: str,
                   transfers: tuple[tuple[str, int], ...]) -> None:
    step = next_step(pod_states, NEW, streams, answering, replicas=3)
    assert (step.action, step.pod, step.reason, step.transfers) == (
        action, pod, reason, transfers), step.message
    if reason in ("WaitingForQuorum", "WaitingForSync"):  # the condition names the streams
        assert all(x.name in step.message for x in streams), step.message


def test_a_roll_goes_through_every_pod_one_at_a_time() -> None:
    """Played out: the pods restart one after another, each leadership moved before its pod
    goes, and never onto a pod that has yet to roll when a rolled one is in sync."""
    revisions = [OLD, OLD, OLD]
    leaders = {"a": 0, "b": 1}
    deleted = []
    for _ in range(20):
        streams = [s(n, ALL, lead, ALL) for n, lead in leaders.items()]
        step = next_step(pods(*revisions), NEW, streams)
        if step.action is Action.IDLE:
            break
        assert step.pod is not None
        if step.action is Action.TRANSFER:
            for name, target in step.transfers:
                assert target != step.pod
                leaders[name] = target
        else:
            assert step.action is Action.DELETE
            assert step.pod not in leaders.values()
            deleted.append(step.pod)
            revisions[step.pod] = NEW
    assert deleted == [2, 1, 0] and revisions == [NEW, NEW, NEW]
    assert set(leaders.values()) <= {1, 2}


@pytest.mark.parametrize("in_progress,answering,action", [
    (True, {0, 1, 2}, Action.IDLE),
    (True, {0, 1}, Action.WAIT),  # the last pod rolled not back yet: the roll is not over
    (False, {0, 1}, Action.IDLE),  # no roll going on: a pod down is not the roll's
])
def test_a_roll_ends_once_the_last_pod_is_back(in_progress: bool, answering: set[int],
                                               action: Action) -> None:
    step = next_step(pods(NEW, NEW, NEW), NEW, [], answering, 3, in_progress)
    assert step.action is action


def late(*revisions: str | None, ready: dict[int, float | None],
         terminating: int | None = None) -> list[PodState]:
    """Pods whose ordinals in ``ready`` are not Ready, for that many seconds (None: unknown)."""
    return [PodState(i, r, ready=i not in ready, terminating=i == terminating,
                     not_ready_for=ready.get(i)) for i, r in enumerate(revisions)]


TIMEOUT = 300.0
FORWARD = [
    # (pods, streams, answering, action, pod, reason, transfers)
    ("an outdated pod not Ready past the timeout (a bad image): rolled forward",
     late(NEW, OLD, OLD, ready={2: 400.0}), [s("a", ALL, 0, (0, 1))], {0, 1},
     Action.DELETE, 2, "RollingForwardPod", ()),
    ("not Ready, not yet past the timeout: waited for",
     late(NEW, OLD, OLD, ready={2: 200.0}), [s("a", ALL, 0, (0, 1))], {0, 1},
     Action.WAIT, 2, "WaitingForPod", ()),
    ("how long not known (no transition time yet): waited for",
     late(OLD, OLD, OLD, ready={2: None}), [], None, Action.WAIT, 2, "WaitingForPod", ()),
    ("a pod of the current template not Ready: nothing to roll forward, the roll says so",
     late(OLD, OLD, NEW, ready={2: 400.0}), [s("a", ALL, 0, (0, 1))], {0, 1},
     Action.WAIT, 2, "NewPodNotReady", ()),
    ("the bad one rolled forward before any Ready pod, even with another pod down",
     late(OLD, OLD, OLD, ready={1: 400.0, 2: 10.0}), [], None,
     Action.DELETE, 1, "RollingForwardPod", ()),
    ("a Ready pod is never taken while another is not Ready (within the timeout)",
     late(OLD, OLD, NEW, ready={2: 10.0}), [], None, Action.WAIT, 2, "WaitingForPod", ()),
    ("a pod being deleted is not deleted again", late(OLD, OLD, OLD, ready={2: 400.0},
                                                      terminating=2), [], None,
     Action.WAIT, 2, "WaitingForPod", ()),
    ("its broker answers (catching up) and holds a quorum's member: the quorum still rules",
     late(OLD, OLD, OLD, ready={1: 400.0}), [s("a", ALL, 0, (0, 1))], {0, 1},
     Action.WAIT, 1, "WaitingForQuorum", ()),
    ("its broker answers and leads: its leaderships go first",
     late(NEW, OLD, OLD, ready={1: 400.0}), [s("a", ALL, 1, ALL)], {0, 1, 2},
     Action.TRANSFER, 1, "TransferringLeadership", (("a", 0),)),
    ("its broker answers, leads nothing, the quorum holds: rolled forward",
     late(NEW, OLD, OLD, ready={1: 400.0}), [s("a", ALL, 0, (0, 2))], {0, 1, 2},
     Action.DELETE, 1, "RollingForwardPod", ()),
]


@pytest.mark.parametrize("pod_states,streams,answering,action,pod,reason,transfers",
                         [row[1:] for row in FORWARD], ids=[row[0] for row in FORWARD])
def test_a_pod_not_ready_past_the_timeout(
        pod_states: list[PodState], streams: list[StreamState], answering: set[int] | None,
        action: Action, pod: int | None, reason: str,
        transfers: tuple[tuple[str, int], ...]) -> None:
    step = next_step(pod_states, NEW, streams, answering, replicas=3,
                     not_ready_timeout=TIMEOUT)
    assert (step.action, step.pod, step.reason, step.transfers) == (
        action, pod, reason, transfers), step.message


def test_no_timeout_waits_for_ever() -> None:
    """A timeout of 0 (as before it existed): a pod not Ready for an hour is waited for."""
    step = next_step(late(OLD, OLD, OLD, ready={2: 3600.0}), NEW, [], None, replicas=3)
    assert (step.action, step.reason) == (Action.WAIT, "WaitingForPod")


def test_a_bad_image_then_a_fix_rolls_through() -> None:
    """Played out: a bad image leaves the first pod rolled not Ready; the roll waits and says
    so; the fix rolls that pod forward at once, then the others one at a time."""
    revisions: list[str] = [OLD, OLD, OLD]
    not_ready: dict[int, float] = {}
    deleted: list[tuple[str, int]] = []
    template = "bad"
    for tick in range(40):
        if tick == 10:
            template = "fixed"
        states = [PodState(i, r, ready=i not in not_ready, not_ready_for=not_ready.get(i))
                  for i, r in enumerate(revisions)]
        step = next_step(states, template, [], None, replicas=3, not_ready_timeout=TIMEOUT)
        if step.action is Action.IDLE:
            break
        for o in not_ready:
            not_ready[o] += 60.0  # a tick is a minute here
        if step.action is Action.DELETE:
            assert step.pod is not None
            assert not not_ready or step.pod in not_ready, "a Ready pod taken with one down"
            deleted.append((step.reason, step.pod))
            revisions[step.pod] = template
            not_ready.pop(step.pod, None)
            if template == "bad":
                not_ready[step.pod] = 0.0
        elif tick == 9:
            assert step.reason == "NewPodNotReady", step.message
    assert deleted == [("RestartingPod", 2), ("RollingForwardPod", 2), ("RestartingPod", 1),
                       ("RestartingPod", 0)]
    assert revisions == ["fixed"] * 3
