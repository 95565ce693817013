"""Where a stream's members go, which one leads at creation, and whether a pod may stop."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from .model import quorum


class Locator(Enum):
    """The ``queue-leader-locator`` Create argument."""

    CLIENT_LOCAL = "client-local"  # the pod that received the Create, when it can hold a member
    BALANCED = "balanced"  # the pod leading the fewest streams

    @classmethod
    def parse(cls, value: str | None) -> Locator:
        """The locator an argument names; absent means client-local (RabbitMQ's default);
        the legacy names ``random`` and ``least-leaders`` are read as balanced."""
        if value is None or value == "":
            return cls.CLIENT_LOCAL
        if value in ("random", "least-leaders"):
            return cls.BALANCED
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown queue-leader-locator {value!r}") from None


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod that may hold members: its ordinal, its zone (None when not labelled), whether it
    is being drained and whether it is ready. Only ready pods not draining get new members."""

    ordinal: int
    zone: str | None = None
    draining: bool = False
    ready: bool = True


@dataclass(frozen=True, slots=True)
class Placement:
    """A new stream's members (the leader first, then the others ascending) and its leader."""

    leader: int
    members: tuple[int, ...]


class NotEnoughPods(ValueError):
    """Fewer pods can take a member than the stream has members."""


@dataclass(slots=True)
class Load:
    """Streams per pod ordinal: members held, and streams led. Updated by :func:`place`'s
    callers (and by :func:`place_super_stream` as it goes)."""

    hosted: dict[int, int] = field(default_factory=dict)
    leading: dict[int, int] = field(default_factory=dict)

    @classmethod
    def holding(cls, member_sets: Iterable[Iterable[int]]) -> Load:
        """The streams each pod holds a member of, from each stream's members (no leaders)."""
        load = cls()
        for members in member_sets:
            for m in members:
                load.hosted[m] = load.hosted.get(m, 0) + 1
        return load

    def add(self, p: Placement) -> None:
        for m in p.members:
            self.hosted[m] = self.hosted.get(m, 0) + 1
        self.leading[p.leader] = self.leading.get(p.leader, 0) + 1


def place(
    pods: Iterable[Pod],
    replicas: int,
    load: Load,
    locator: Locator = Locator.BALANCED,
    receiving: int | None = None,
) -> Placement:
    """Choose ``replicas`` distinct pods for a new stream and its leader.

    The leader: with client-local the pod that received the Create (``receiving``) if it can
    take a member, else (and with balanced) the candidate leading the fewest streams, then
    holding the fewest, then the lowest ordinal. The other members, one at a time: a pod in
    the zone holding the fewest of this stream's members so far (distinct zones while there
    are zones left; a pod without a zone label counts as a zone of its own), then holding the
    fewest streams, then the lowest ordinal.
    """
    if replicas < 1:
        raise ValueError(f"a stream needs at least one member, not {replicas}")
    candidates = {p.ordinal: p for p in pods if p.ready and not p.draining}
    if len(candidates) < replicas:
        raise NotEnoughPods(
            f"{replicas} members need {replicas} ready pods not draining, "
            f"there are {len(candidates)}"
        )
    hosted, leading = load.hosted, load.leading
    if locator is Locator.CLIENT_LOCAL and receiving in candidates:
        leader = receiving
    else:
        leader = min(candidates, key=lambda o: (leading.get(o, 0), hosted.get(o, 0), o))
    chosen = [leader]
    zones: dict[str, int] = {}

    def zone_use(o: int) -> int:
        z = candidates[o].zone
        return 0 if z is None else zones.get(z, 0)

    while True:
        z = candidates[chosen[-1]].zone
        if z is not None:
            zones[z] = zones.get(z, 0) + 1
        if len(chosen) == replicas:
            break
        rest = [o for o in candidates if o not in chosen]
        chosen.append(min(rest, key=lambda o: (zone_use(o), hosted.get(o, 0), o)))
    return Placement(leader, (leader, *sorted(chosen[1:])))


def place_super_stream(
    pods: Iterable[Pod], partitions: int, replicas: int, load: Load
) -> list[Placement]:
    """Placements of a super stream's partitions, in order: each balanced against the load
    including the partitions placed before it, so their leaders spread across the pods.
    ``load`` is updated."""
    pods = list(pods)
    out = []
    for _ in range(partitions):
        p = place(pods, replicas, load, Locator.BALANCED)
        load.add(p)
        out.append(p)
    return out


@dataclass(frozen=True, slots=True)
class StreamMembers:
    """What :func:`safe_to_stop` needs of a stream: its members and those in sync (the leader
    counts as in sync while it leads)."""

    name: str
    members: tuple[int, ...]
    in_sync: frozenset[int]


@dataclass(frozen=True, slots=True)
class StopCheck:
    safe: bool
    why: str
    #: streams that would fall below a quorum of in-sync members: they forbid the stop
    blocking: tuple[str, ...] = ()
    #: streams already below quorum, or that tolerate no failure (RF 1 or 2): reported only,
    #: a stop cannot make them available and waiting on them would hang (Strimzi #2964)
    reported: tuple[str, ...] = ()


def stop_check(pod: int, streams: Iterable[StreamMembers]) -> StopCheck:
    """Whether ``pod`` may stop (roll, drain, scale-down): every stream with a member there
    must keep a quorum of in-sync members without it (Strimzi's KafkaAvailability)."""
    blocking: list[str] = []
    reported: list[str] = []
    for s in streams:
        members = set(s.members)
        if pod not in members:
            continue
        need = quorum(len(members))
        in_sync = s.in_sync & members
        if len(in_sync) < need or len(members) - need == 0:
            reported.append(s.name)
        elif len(in_sync - {pod}) < need:
            blocking.append(s.name)
    parts = []
    if blocking:
        parts.append(f"would leave {len(blocking)} stream(s) without a quorum in sync: "
                     + ", ".join(sorted(blocking)))
    if reported:
        parts.append(f"{len(reported)} stream(s) already below quorum or tolerating no "
                     "failure, not waited on: " + ", ".join(sorted(reported)))
    if not parts:
        parts.append(f"every stream on pod {pod} keeps a quorum in sync")
    return StopCheck(not blocking, "; ".join(parts), tuple(sorted(blocking)),
                     tuple(sorted(reported)))


def safe_to_stop(pod: int, streams: Iterable[StreamMembers]) -> tuple[bool, str]:
    """:func:`stop_check` as ``(safe, why)``."""
    c = stop_check(pod, streams)
    return c.safe, c.why


def leaders_on(pod: int, leaders: Mapping[str, int]) -> list[str]:
    """The streams (by name) ``pod`` leads: those to transfer before it stops."""
    return sorted(name for name, leader in leaders.items() if leader == pod)


def spread(placements: Sequence[Placement], pods: Collection[int]) -> dict[int, int]:
    """Streams led per pod (every pod listed, 0 included): for tests and status."""
    out = dict.fromkeys(pods, 0)
    for p in placements:
        out[p.leader] = out.get(p.leader, 0) + 1
    return out
