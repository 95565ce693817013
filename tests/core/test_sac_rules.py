"""core/sac.py's rules on their own: who is active (a table), a group's members that are not
local subscriptions (a replicated stream leader's stand-ins), consumers decided elsewhere
(``defer``) and a leader change (``withdraw``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from streamlet.core.sac import SacGroups, active_index


@pytest.mark.parametrize(("members", "partition_index", "expected"), [
    (0, -1, None), (0, 3, None),   # an empty group: nobody
    (1, -1, 0), (3, -1, 0),        # first come, first served
    (1, 0, 0), (1, 5, 0),          # one consumer takes every partition
    (2, 0, 0), (2, 1, 1), (2, 2, 0), (2, 3, 1),
    (3, 4, 1), (3, 5, 2), (3, 6, 0),  # RabbitMQ's index % n
])
def test_who_is_active(members: int, partition_index: int, expected: int | None) -> None:
    assert active_index(members, partition_index) == expected


@dataclass(eq=False)
class _Stream:
    deleted: bool = False


@dataclass(eq=False)
class _Member:
    """A group member that is no subscription: told through its own ``conn``."""

    stream: _Stream
    told: list[bool] = field(default_factory=list)
    active: bool = False
    sac_key: tuple[int, str] | None = None

    @property
    def conn(self) -> _Member:
        return self

    def activate(self, reader: Any, active: bool) -> None:
        self.told.append(active)


@dataclass
class _Decider:
    said: list[str] = field(default_factory=list)
    active: bool = False

    def leave(self, consumer: Any) -> None:
        self.said.append("leave")

    def stepped_down(self, consumer: Any) -> None:
        self.said.append("stepped_down")

    def is_active(self, consumer: Any) -> bool:
        return self.active


def test_the_rules_hold_for_members_that_are_not_subscriptions() -> None:
    stream = _Stream()
    groups = SacGroups()
    a, b = _Member(stream), _Member(stream)
    groups.join(a, "g", partition_index=1)
    groups.join(b, "g", partition_index=1)  # 1 % 2: b's, once a stepped down
    assert a.told == [True, False] and b.told == [] and not a.active
    groups.stepped_down(a)
    assert b.told == [True] and groups.is_active(b)


def test_a_deferred_consumer_is_decided_by_its_decider() -> None:
    stream = _Stream()
    groups = SacGroups()
    sub, decider = _Member(stream), _Decider()
    groups.defer(sub, "g", decider)
    assert sub.sac_key is not None and sub.told == []  # nobody here activates it
    assert not groups.is_active(sub)
    decider.active = True
    assert groups.is_active(sub)
    groups.stepped_down(sub)
    groups.leave(sub)
    assert decider.said == ["stepped_down", "leave"] and sub.sac_key is None
    groups.leave(sub)  # once only
    assert decider.said == ["stepped_down", "leave"]


def test_withdraw_takes_a_streams_groups_out_and_activates_nobody() -> None:
    stream, other = _Stream(), _Stream()
    groups = SacGroups()
    a, b, c = _Member(stream), _Member(stream), _Member(other)
    groups.join(a, "g")
    groups.join(b, "g")
    groups.join(c, "g")
    out = groups.withdraw(stream)
    assert [(w.consumer, w.name, w.partition_index, w.told_active) for w in out] == [
        (a, "g", -1, True), (b, "g", -1, False)]
    assert a.sac_key is None and b.sac_key is None
    groups.leave(a)  # a withdrawn consumer's leave changes nothing
    assert b.told == [] and groups.is_active(c)


def test_a_held_stream_steps_down_but_activates_nobody_until_released() -> None:
    stream, other = _Stream(), _Stream()
    groups = SacGroups()
    a, b, c = _Member(stream), _Member(stream), _Member(other)
    groups.hold(stream)
    groups.join(a, "g", partition_index=1)
    groups.join(c, "g")
    assert a.told == [] and c.told == [True], "a hold is the stream's only"
    assert groups.held(stream) and not groups.held(other)
    groups.release(stream)
    assert a.told == [True] and not groups.held(stream)
    groups.hold(stream)
    groups.join(b, "g", partition_index=1)  # 1 % 2: b's
    assert a.told == [True, False], "a step-down is never held"
    groups.stepped_down(a)
    assert b.told == []
    groups.release(stream)
    assert b.told == [True]
