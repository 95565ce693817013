"""Members of a new stream, its leader, super stream leaders, and whether a pod may stop."""

from __future__ import annotations

import pytest

from streamlet.replication.placement import (
    Load,
    Locator,
    NotEnoughPods,
    Placement,
    Pod,
    StreamMembers,
    leaders_on,
    place,
    place_super_stream,
    safe_to_stop,
    spread,
    stop_check,
)


def pods(n: int, zones: str | None = None, **flags: set[int]) -> list[Pod]:
    """pods(4, "aabb", draining={1}): ordinals 0-3, zone of each a letter of ``zones``."""
    return [Pod(i, zones[i] if zones else None, i in flags.get("draining", set()),
                i not in flags.get("unready", set())) for i in range(n)]


@pytest.mark.parametrize(("value", "locator"), [
    (None, Locator.CLIENT_LOCAL), ("", Locator.CLIENT_LOCAL),
    ("client-local", Locator.CLIENT_LOCAL), ("balanced", Locator.BALANCED),
    ("random", Locator.BALANCED), ("least-leaders", Locator.BALANCED),
])
def test_locator_parse(value: str | None, locator: Locator) -> None:
    assert Locator.parse(value) is locator


def test_locator_unknown() -> None:
    with pytest.raises(ValueError, match="queue-leader-locator"):
        Locator.parse("nearest")


# (pods, replicas, load, locator, receiving, expected)
TABLE = [
    pytest.param(pods(3), 1, Load(), Locator.BALANCED, None, Placement(0, (0,)), id="rf1 empty"),
    pytest.param(pods(3), 3, Load(), Locator.BALANCED, None, Placement(0, (0, 1, 2)), id="rf3 of 3"),
    pytest.param(pods(3), 3, Load(leading={0: 2, 1: 1, 2: 1}), Locator.BALANCED, None,
                 Placement(1, (1, 0, 2)), id="balanced: fewest led, lowest ordinal"),
    pytest.param(pods(3), 3, Load(hosted={1: 5}, leading={0: 1}), Locator.BALANCED, None,
                 Placement(2, (2, 0, 1)), id="balanced: fewest led, then fewest held"),
    pytest.param(pods(5), 3, Load(hosted={0: 9, 1: 1, 2: 0, 3: 4, 4: 1}), Locator.BALANCED, None,
                 Placement(2, (2, 1, 4)), id="members: fewest held"),
    pytest.param(pods(3), 3, Load(), Locator.CLIENT_LOCAL, 2, Placement(2, (2, 0, 1)),
                 id="client-local"),
    pytest.param(pods(3, draining={2}), 2, Load(), Locator.CLIENT_LOCAL, 2, Placement(0, (0, 1)),
                 id="client-local on a draining pod: balanced"),
    pytest.param(pods(3), 2, Load(leading={0: 1}), Locator.CLIENT_LOCAL, None, Placement(1, (1, 0)),
                 id="client-local without a receiving pod: balanced"),
    pytest.param(pods(3), 2, Load(), Locator.CLIENT_LOCAL, 7, Placement(0, (0, 1)),
                 id="client-local, receiving pod unknown: balanced"),
    pytest.param(pods(4, unready={0}, draining={1}), 2, Load(), Locator.BALANCED, None,
                 Placement(2, (2, 3)), id="unready and draining pods get nothing"),
    pytest.param(pods(6, "aabbcc"), 3, Load(), Locator.BALANCED, None, Placement(0, (0, 2, 4)),
                 id="zones: one member each"),
    pytest.param(pods(6, "aabbcc"), 3, Load(hosted={2: 1}), Locator.BALANCED, None,
                 Placement(0, (0, 3, 4)), id="zones: then fewest held inside a zone"),
    pytest.param(pods(4, "aabb"), 3, Load(), Locator.BALANCED, None, Placement(0, (0, 1, 2)),
                 id="zones: fewer zones than members"),
    pytest.param(pods(4, "aaab"), 3, Load(), Locator.CLIENT_LOCAL, 1, Placement(1, (1, 0, 3)),
                 id="zones: around a client-local leader"),
    pytest.param([Pod(0, "a"), Pod(1, "a"), Pod(2, None)], 2, Load(), Locator.BALANCED, None,
                 Placement(0, (0, 2)), id="zones: an unlabelled pod is a zone of its own"),
]


@pytest.mark.parametrize(("candidates", "replicas", "load", "locator", "receiving", "expected"), TABLE)
def test_place(candidates: list[Pod], replicas: int, load: Load, locator: Locator,
               receiving: int | None, expected: Placement) -> None:
    p = place(candidates, replicas, load, locator, receiving)
    assert p == expected
    assert len(set(p.members)) == replicas and p.members[0] == p.leader


@pytest.mark.parametrize(("candidates", "replicas"), [
    (pods(2), 3), (pods(3, draining={0}), 3), (pods(3, unready={1}), 3), ([], 1),
])
def test_not_enough_pods(candidates: list[Pod], replicas: int) -> None:
    with pytest.raises(NotEnoughPods):
        place(candidates, replicas, Load())


def test_at_least_one_member() -> None:
    with pytest.raises(ValueError):
        place(pods(3), 0, Load())


def test_super_stream_leaders_spread() -> None:
    load = Load()
    placed = place_super_stream(pods(3), 6, 3, load)
    assert [p.leader for p in placed] == [0, 1, 2, 0, 1, 2]
    assert spread(placed, range(3)) == {0: 2, 1: 2, 2: 2}
    assert load.hosted == {0: 6, 1: 6, 2: 6} and load.leading == {0: 2, 1: 2, 2: 2}


def test_super_stream_leaders_spread_around_existing_load() -> None:
    load = Load(hosted={0: 3, 1: 3, 2: 3, 3: 0}, leading={0: 3})
    placed = place_super_stream(pods(4), 3, 2, load)
    assert [p.leader for p in placed] == [3, 1, 2]  # 3 holds least
    assert all(len(set(p.members)) == 2 for p in placed)


def s(name: str, members: tuple[int, ...], in_sync: set[int]) -> StreamMembers:
    return StreamMembers(name, members, frozenset(in_sync))


# (pod, streams, safe, blocking, reported)
STOPS = [
    pytest.param(0, [], True, (), (), id="no stream"),
    pytest.param(0, [s("a", (1, 2, 3), {1, 2, 3})], True, (), (), id="no member there"),
    pytest.param(0, [s("a", (0, 1, 2), {0, 1, 2})], True, (), (), id="rf3 all in sync"),
    pytest.param(0, [s("a", (0, 1, 2), {0, 1})], False, ("a",), (), id="rf3 another lags"),
    pytest.param(0, [s("a", (0, 1, 2), {1, 2})], True, (), (), id="rf3 the pod itself lags"),
    pytest.param(0, [s("a", (0, 1, 2), {0})], True, (), ("a",), id="rf3 already below quorum"),
    pytest.param(0, [s("a", (0, 1, 2), {1})], True, (), ("a",), id="rf3 below quorum elsewhere"),
    pytest.param(0, [s("a", (0,), {0})], True, (), ("a",), id="rf1 tolerates nothing"),
    pytest.param(0, [s("a", (0, 1), {0, 1})], True, (), ("a",), id="rf2 tolerates nothing"),
    pytest.param(0, [s("a", (0, 1, 2, 3, 4), {0, 1, 2})], False, ("a",), (), id="rf5 three in sync"),
    pytest.param(0, [s("a", (0, 1, 2, 3, 4), {0, 1, 2, 3})], True, (), (), id="rf5 four in sync"),
    pytest.param(0, [s("a", (0, 1, 2), {0, 1, 2, 7})], True, (), (), id="in sync non-member ignored"),
    pytest.param(0, [s("b", (0, 1, 2), {0, 2}), s("a", (0, 1, 2), {0, 1}), s("c", (0, 1, 2), {0}),
                     s("d", (0, 1, 2), {0, 1, 2}), s("e", (3, 4, 5), {3})],
                 False, ("a", "b"), ("c",), id="mixed"),
]


@pytest.mark.parametrize(("pod", "streams", "safe", "blocking", "reported"), STOPS)
def test_stop_check(pod: int, streams: list[StreamMembers], safe: bool,
                    blocking: tuple[str, ...], reported: tuple[str, ...]) -> None:
    c = stop_check(pod, streams)
    assert (c.safe, c.blocking, c.reported) == (safe, blocking, reported)
    assert safe_to_stop(pod, streams) == (safe, c.why)
    for name in blocking + reported:
        assert name in c.why


def test_stop_why_reads() -> None:
    ok, why = safe_to_stop(2, [s("a", (0, 1, 2), {0, 1, 2})])
    assert ok and why == "every stream on pod 2 keeps a quorum in sync"
    ok, why = safe_to_stop(2, [s("a", (0, 1, 2), {1, 2})])
    assert not ok and why == "would leave 1 stream(s) without a quorum in sync: a"


def test_leaders_on() -> None:
    assert leaders_on(1, {"b": 1, "a": 1, "c": 0}) == ["a", "b"]
    assert leaders_on(2, {"a": 1}) == []


def test_load_holding_counts_the_members_of_each_stream() -> None:
    load = Load.holding([[0, 1, 2], [1, 2], [2]])
    assert load.hosted == {0: 1, 1: 2, 2: 3} and load.leading == {}
