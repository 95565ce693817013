"""A replicated Stream's record and the operator's decisions on it, as pure functions.

The record is ``status.replication`` (``Replication``): the epoch, the leader, the members
(pod ordinals), the members in sync, the phase, the member set change in progress. It is
written with a resourceVersion compare-and-swap (driver.py), so it is the one truth about
which epochs were used. This module decides, from the record and what the brokers answer,
whether a stream needs an election, which members are in sync, which are lost, and the
conditions the Stream shows; driver.py carries it out. Tests: tests/operator/test_failover.py
and test_member_change_units.py (tables).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from streamlet.replication.election import Decision, elect
from streamlet.replication.liveness import Contact
from streamlet.replication.membership import Action, Change, Kind
from streamlet.replication.model import NO_LEADER, Tail, quorum
from streamlet.replication.placement import Pod

#: The annotation that asks for an election now, unclean if no majority answers, preferring
#: the ordinal it names (docs/replication.md).
FORCE_LEADER = "streamlet.dev/force-leader"

#: ``status.replication.phase``
READY = "Ready"  # a leader, and a quorum of members in sync with it
ELECTING = "Electing"  # an epoch reserved and no leader yet, or a new leader not yet followed
UNAVAILABLE = "Unavailable"  # no leader: no fenced majority (Metadata answers 0xFFFF)

#: The condition types this module sets (besides plan.py's Ready).
AVAILABLE = "Available"
UNDER_REPLICATED = "UnderReplicated"
ELECTING_CONDITION = "Electing"
UNCLEAN_ELECTION = "UncleanElection"

#: A leader that misses this many probes in a row is replaced (docs/replication.md).
SUSPECT_AFTER = 3

#: The condition a member set change in progress sets, and why a change was started.
MEMBERS_CHANGING = "MembersChanging"
LOST = "MemberLost"  # its pod gone or not ready for the Broker's replaceAfter
REMOVED_POD = "PodRemoved"  # its pod is removed by a scale-down
RESIZE = "ReplicasChanged"  # spec.replicas changed


@dataclass(frozen=True)
class Changing:
    """``status.replication.changing``: the member set change in progress and its step (a
    ``membership.Action`` value), since when (RFC 3339: a restarted driver keeps the clock),
    and why it was started (``reason``: LOST, REMOVED_POD or RESIZE)."""

    kind: Kind
    member: int
    step: str
    started: str
    reason: str = RESIZE
    message: str = ""

    @property
    def change(self) -> Change:
        return Change(self.kind, self.member)

    @property
    def replaces(self) -> bool:
        """A member that goes because it was lost or its pod is removed (MemberReplaced)."""
        return self.reason in (LOST, REMOVED_POD)

    @classmethod
    def parse(cls, doc: Mapping[str, Any] | None) -> Changing | None:
        if not doc:
            return None
        return cls(Kind(str(doc["kind"])), int(doc["member"]), str(doc.get("step") or ""),
                   str(doc.get("started") or ""), str(doc.get("reason") or RESIZE),
                   str(doc.get("message") or ""))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "member": self.member, "step": self.step,
                "started": self.started, "reason": self.reason, "message": self.message}


@dataclass(frozen=True)
class Replication:
    """``status.replication``: ``leader`` None while there is none."""

    epoch: int
    leader: int | None
    members: tuple[int, ...]
    in_sync: tuple[int, ...] = ()
    phase: str = ELECTING
    reason: str = ""
    #: the member set change in progress (one at a time), None when there is none
    changing: Changing | None = None
    #: former members told to drop their copy that have not done so yet (unreachable)
    leaving: tuple[int, ...] = ()

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> Replication | None:
        doc = (status or {}).get("replication")
        if not doc:
            return None
        leader = doc.get("leader")
        return cls(int(doc["epoch"]), None if leader is None else int(leader),
                   tuple(int(m) for m in doc.get("members") or ()),
                   tuple(int(m) for m in doc.get("inSync") or ()),
                   str(doc.get("phase") or ELECTING), str(doc.get("reason") or ""),
                   changing=Changing.parse(doc.get("changing")),
                   leaving=tuple(int(m) for m in doc.get("leaving") or ()))

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "leader": self.leader, "members": list(self.members),
                "inSync": list(self.in_sync), "phase": self.phase, "reason": self.reason,
                "changing": self.changing.to_dict() if self.changing is not None else None,
                "leaving": list(self.leaving)}

    @property
    def followers(self) -> tuple[int, ...]:
        return tuple(m for m in self.members if m != self.leader)


def discovered(leader: int, holders: Collection[int], replicas: int) -> Replication | None:
    """The record of a stream just created with ``replicas`` copies, from the pods that hold it
    (``holders``, by StreamStats) and the pod the operator sent the Create to (it leads:
    client-local). Epoch 1: a replicated Create assigns it, and on Kubernetes only this
    operator elects, recording each epoch here first. None until every copy answers (a pod
    that is down would be left out of the member set) or when the Create's pod holds none."""
    members = tuple(sorted(set(holders)))
    if len(members) != replicas or leader not in members:
        return None
    return Replication(1, leader, members, (), ELECTING, "Created")


#: The reason of the record of a stream of one copy made a one-member replicated stream.
ONE_COPY = "OneCopy"


def one_copy(leader: int, holders: Collection[int], plain: bool,
             moving: bool) -> Replication | None:
    """The record of a stream created with one copy and now asked for more: epoch 1, led by
    the pod it is placed on (``leader``), the only member, written before that pod is
    assigned so. Only when that pod alone holds it, says it has no member state (``plain``:
    ReplicaContact refused with PRECONDITION_FAILED, not merely unanswered: a replicated
    Create's copy always has one) and no move is under way (``moving``: two pods hold it
    until the move ends). None: not (yet)."""
    if moving or not plain or set(holders) != {leader}:
        return None
    return Replication(1, leader, (leader,), (), ELECTING, ONE_COPY)


class Step(Enum):
    NONE = "none"
    ELECT = "elect"  # the leader is gone, suspected, or there is none: fence and elect
    FORCE = "force"  # the force-leader annotation asks for an election now


def next_step(record: Replication, misses: Mapping[int, int], up: Collection[int],
              force: bool, draining: Collection[int] = ()) -> Step:
    """Whether this stream needs an election: asked for (``force``); no leader, with a
    majority of the members answering probes (``up``; fewer could not elect: wait rather
    than use up an epoch a tick); its leader missed SUSPECT_AFTER probes in a row
    (``misses``: ordinal -> probes missed in a row); or its leader's pod is being deleted
    (``draining``) while a majority of the members on other pods answers (else it keeps
    leading until it stops: moving would leave the stream with no leader sooner)."""
    if force:
        return Step.FORCE
    quorate = quorum(len(record.members))
    if record.leader is None:
        reachable = len(set(up) & set(record.members))
        return Step.ELECT if reachable >= quorate else Step.NONE
    if misses.get(record.leader, 0) >= SUSPECT_AFTER:
        return Step.ELECT
    staying = set(up) & set(record.members) - set(draining)
    if record.leader in draining and len(staying) >= quorate:
        return Step.ELECT
    return Step.NONE


def choose(record: Replication, answers: Mapping[int, Tail | None], *,
           draining: Collection[int] = (), preferred: int | None = None,
           force: bool = False) -> Decision:
    """The election's decision from the fence answers: among the members not on a pod being
    deleted when they are a fenced majority by themselves (so leadership leaves a pod going
    away even when it holds the longest log: what only it holds was never confirmed, since
    every confirmed chunk is on a majority, which meets theirs); else among all who answered
    (``draining`` then only breaks ties)."""
    def run(given: Mapping[int, Tail | None]) -> Decision:
        return elect(record.members, record.epoch, given, preferred=preferred,
                     in_sync=record.in_sync, draining=draining, force=force)

    if draining:
        staying = {m: (None if m in draining else t) for m, t in answers.items()}
        decision = run(staying)
        if decision.leader != NO_LEADER and not decision.unclean:
            return decision
    return run(answers)


def in_sync(leader: int, committed: int, tails: Mapping[int, int | None]) -> tuple[int, ...]:
    """The members holding every chunk the leader had committed (``committed``, a chunk id)
    when asked: the leader itself, and each follower whose last chunk id (``tails``; None:
    it did not answer) is at least that."""
    return tuple(sorted({leader} | {m for m, t in tails.items()
                                    if m != leader and t is not None and t >= committed}))


def phase_of(record: Replication, in_sync_now: Collection[int]) -> str:
    """Ready once the leader has a quorum of its members in sync; Electing before."""
    if record.leader is None:
        return record.phase if record.phase in (ELECTING, UNAVAILABLE) else UNAVAILABLE
    return READY if len(set(in_sync_now) & set(record.members)) >= quorum(
        len(record.members)) else ELECTING


def _force_entries(value: str) -> dict[str, str] | None:
    """``p=ordinal`` entries by partition; None unless every entry is one (a name before "=")."""
    named = {}
    for entry in value.split(","):
        name, eq, text = entry.partition("=")
        if not eq or not name.strip():
            return None
        named[name.strip()] = text.strip()
    return named


def parse_force(value: str | None, members: Collection[int], partition: str | None = None
                ) -> tuple[int | None, str | None]:
    """The annotation's ordinal for a stream, or why it is refused (not an ordinal, not a
    member). The value is an ordinal (every partition of a super stream), or ``p=ordinal``
    entries separated by commas, one per partition to force (a ``partition`` not named:
    nothing to force for it)."""
    if value is None:
        return None, None
    if "=" not in value:
        text = value.strip()
    else:
        named = _force_entries(value)
        if named is None:
            return None, (f"{FORCE_LEADER}: {value!r} is neither an ordinal nor"
                          " partition=ordinal entries")
        if partition is None:
            return None, f"{FORCE_LEADER}: {value!r} names partitions; this is one stream"
        if partition not in named:
            return None, None
        text = named[partition]
    if not text.isdigit():
        return None, f"{FORCE_LEADER}: {text!r} is not a pod ordinal"
    if int(text) not in members:
        return None, f"{FORCE_LEADER}: {text} is not a member (members: {sorted(members)})"
    return int(text), None


def force_rest(value: str | None, partition: str | None) -> str | None:
    """The annotation once ``partition``'s forced election is done (or refused): its entry
    removed; None (the annotation removed) when nothing is left, or when it was an ordinal
    for every partition, or cannot be read."""
    named = _force_entries(value) if value is not None and partition is not None else None
    if named is None:
        return None
    return ",".join(f"{p}={o}" for p, o in named.items() if p != partition) or None


def unclean_elsewhere(records: Mapping[str, Replication | None], partition: str) -> list[str]:
    """The partitions other than ``partition`` whose last election was unclean: the Stream's
    UncleanElection condition stays while any is (a clean election of one partition does not
    clear what another's lost)."""
    return sorted(p for p, r in records.items()
                  if p != partition and r is not None and r.reason == UNCLEAN_ELECTION)


Condition = tuple[str, bool, str, str]  # (type, status, reason, message)


def conditions(record: Replication, pod: str) -> list[Condition]:
    """Available, UnderReplicated and Electing from the record (``pod``: the leader's pod name,
    when there is a leader)."""
    members = len(record.members)
    synced = len(set(record.in_sync) & set(record.members))
    reason = record.reason or record.phase
    result: list[Condition] = []
    if record.phase == READY and record.leader is not None:
        result.append((AVAILABLE, True, "LeaderElected",
                       f"{pod} leads epoch {record.epoch}"))
        result.append((ELECTING_CONDITION, False, "LeaderElected",
                       f"{pod} leads epoch {record.epoch}"))
    elif record.leader is None:
        result.append((AVAILABLE, False, reason,
                       f"no leader in epoch {record.epoch}: publishes are refused"))
        result.append((ELECTING_CONDITION, True, reason,
                       f"epoch {record.epoch}: waiting for a majority of the members"))
    else:
        result.append((AVAILABLE, False, "Electing",
                       f"{pod} leads epoch {record.epoch}; {synced} of {members} in sync,"
                       f" {quorum(members)} needed"))
        result.append((ELECTING_CONDITION, True, reason,
                       f"{pod} assigned in epoch {record.epoch}; waiting for a quorum in sync"))
    lagging = synced < members
    result.append((UNDER_REPLICATED, lagging, "MembersBehind" if lagging else "AllInSync",
                   f"{synced} of {members} members in sync"))
    return result


def with_phase(record: Replication, in_sync_now: tuple[int, ...]) -> Replication:
    """The record after a look at its members: who is in sync and the phase that follows."""
    return replace(record, in_sync=in_sync_now, phase=phase_of(record, in_sync_now))


# --- member set changes ------------------------------------------------------------------------

#: A change that does not finish within this many seconds is given up (a learner that cannot
#: catch up, a member to remove that keeps leading): the next tick may start it again.
CHANGE_TIMEOUT_S = 600.0


def unready(ordinals: Collection[int], up: Collection[int],
            pod_ready: Mapping[int, bool]) -> set[int]:
    """The pods of ``ordinals`` not fit to hold a member now: not answering probes (``up``),
    or whose Pod object says not Ready (``pod_ready``; a pod without one counts by its probe
    alone)."""
    return {o for o in ordinals if o not in up or not pod_ready.get(o, True)}


def change_pods(ordinals: Collection[int], up: Collection[int], not_ready: Collection[int],
                avoid: Collection[int], staying: int,
                zones: Mapping[int, str] | None = None) -> list[Pod]:
    """The pods as ``membership.next_change`` sees them: draining when a scale-down removes
    them (ordinal ``staying`` or above), ready when they answer, are Ready and are not to be
    avoided (drained: no new member goes there)."""
    return [Pod(o, (zones or {}).get(o), o >= staying,
                o in up and o not in not_ready and o not in avoid) for o in sorted(ordinals)]


def start_change(change: Change, members: Collection[int], lost_now: Collection[int],
                 removed: Collection[int], started: str, message: str) -> Changing:
    """The record of ``change`` as it starts: its reason (the member it replaces was lost or
    is on a removed pod, else a changed replica count), its first step."""
    if change.kind is Kind.REMOVE:
        which = {change.member}
        step = Action.JOIN.value
    else:
        which = set(members)
        step = Action.LEARN.value
    reason = (LOST if which & set(lost_now) else
              REMOVED_POD if which & set(removed) else RESIZE)
    return Changing(change.kind, change.member, step, started, reason, message)


def changing_condition(records: Mapping[str, Replication | None]) -> Condition:
    """MembersChanging of a Stream from its records (one, or a super stream's partitions by
    name): True while any has a change in progress, naming each."""
    busy = {name: r.changing for name, r in records.items()
            if r is not None and r.changing is not None}
    if not busy:
        return (MEMBERS_CHANGING, False, "NoChange", "no member set change in progress")
    first = next(iter(busy.values()))
    prefix = len(records) > 1
    return (MEMBERS_CHANGING, True, first.reason, "; ".join(
        (f"{name}: " if prefix else "") + f"{c.change} ({c.step}): {c.message}"
        for name, c in busy.items()))


# --- a super stream's partitions ---------------------------------------------------------------

#: The status field holding a replicated super stream's records, one per partition (keyed by
#: the partition's broker stream); ``status.replication`` stays a single stream's.
PARTITIONS_FIELD = "partitionReplication"


@dataclass(frozen=True)
class Unit:
    """One replicated broker stream the placement driver looks after: a single Stream's
    stream (``partition`` None: its record is ``status.replication``), or one partition of a
    super stream (its record is ``status.partitionReplication[partition]``)."""

    resource: str  # the Stream resource's name
    stream: str  # the broker stream
    partition: str | None = None

    @property
    def key(self) -> str:
        """How the driver, the drain and the roll name it: the resource, or resource/partition."""
        return self.resource if self.partition is None else f"{self.resource}/{self.partition}"


def units(obj: Mapping[str, Any]) -> list[Unit]:
    """The replicated broker streams of a created Stream: itself, or each partition (in the
    order of ``status.placement``)."""
    name = str(obj["metadata"]["name"])
    status = obj.get("status") or {}
    applied = status.get("applied") or {}
    if int(applied.get("partitions") or 1) <= 1:
        return [Unit(name, str(applied.get("name") or name))]
    return [Unit(name, str(p["stream"]), str(p["stream"]))
            for p in status.get("placement") or ()]


def record_of(status: Mapping[str, Any] | None, unit: Unit) -> Replication | None:
    """The unit's record in a Stream's status; None until discovered."""
    if unit.partition is None:
        return Replication.from_status(status)
    by_partition = (status or {}).get(PARTITIONS_FIELD) or {}
    return Replication.from_status({"replication": by_partition.get(unit.partition)})


def records_of(obj: Mapping[str, Any]) -> dict[str, Replication | None]:
    """Every unit's record by key (None: not discovered yet)."""
    status = obj.get("status") or {}
    return {u.key: record_of(status, u) for u in units(obj)}


def record_patch(unit: Unit, record: Replication) -> dict[str, Any]:
    """The status fields (a merge patch) that write ``record`` for ``unit``: a partition's
    entry alone, so its siblings' entries stay as they are."""
    if unit.partition is None:
        return {"replication": record.to_dict()}
    return {PARTITIONS_FIELD: {unit.partition: record.to_dict()}}


def members_of(status: Mapping[str, Any] | None) -> tuple[int, ...] | None:
    """The pods a replicated Stream's members are on: its record's members, or every
    partition's (their union); None while any is not known yet (not discovered)."""
    st = status or {}
    partitions = int((st.get("applied") or {}).get("partitions") or 1)
    if partitions <= 1:
        record = Replication.from_status(st)
        return record.members if record is not None else None
    by_partition = st.get(PARTITIONS_FIELD) or {}
    placed = [str(p["stream"]) for p in st.get("placement") or ()]
    if not placed or any(not by_partition.get(p) for p in placed):
        return None
    return tuple(sorted({int(m) for p in placed for m in by_partition[p].get("members") or ()}))


def discovered_partition(contacts: Mapping[int, Contact | None],
                         replicas: int) -> Replication | None:
    """The record of a super stream's partition just created with ``replicas`` copies, from
    its holders' ReplicaContact answers (``contacts``: pod ordinal -> answer; None: it does
    not hold it or did not answer). The partitions' leaders were spread by the broker that
    took the Create (place_super_stream), so the leader is the one holder of epoch 1 that does
    not follow. None until every copy answers in epoch 1 with exactly one leader."""
    holders = {m: c for m, c in contacts.items() if c is not None}
    if len(holders) != replicas or any(c.epoch != 1 for c in holders.values()):
        return None
    leaders = [m for m, c in holders.items() if not c.following]
    if len(leaders) != 1:
        return None
    return Replication(1, leaders[0], tuple(sorted(holders)), (), ELECTING, "Created")


#: What the summary says of a partition whose record is not written yet.
DISCOVERING = "Discovering"


def summarise(records: Mapping[str, Replication | None],
              pod: Callable[[int], str]) -> list[Condition]:
    """Available, UnderReplicated and Electing of a super stream, from its partitions'
    records (by name; None: not discovered yet; ``pod``: a pod ordinal's name). Each is as
    good as the worst partition: Available only when every partition is, Electing and
    UnderReplicated when any is; the message names the partitions that are not (or, when all
    are, each partition's leader)."""
    per: dict[str, dict[str, tuple[bool, str, str]]] = {}
    for name, record in records.items():
        if record is None:
            waiting = (DISCOVERING, "members not known yet")
            per[name] = {AVAILABLE: (False, *waiting), ELECTING_CONDITION: (True, *waiting)}
            continue
        leader = pod(record.leader) if record.leader is not None else ""
        per[name] = {t: (v, r, m) for t, v, r, m in conditions(record, leader)}
    result: list[Condition] = []
    for type_, good in ((AVAILABLE, True), (ELECTING_CONDITION, False),
                        (UNDER_REPLICATED, False)):
        known = {n: c[type_] for n, c in per.items() if type_ in c}
        bad = {n: c for n, c in known.items() if c[0] != good}
        if bad:
            first = next(iter(bad.values()))
            result.append((type_, not good, first[1],
                           "; ".join(f"{n}: {m}" for n, (_, _, m) in bad.items())))
        elif known:
            first = next(iter(known.values()))
            result.append((type_, good, first[1],
                           "; ".join(f"{n}: {m}" for n, (_, _, m) in known.items())))
    return result
