"""What one pass of the Stream reconciler does, and what its status says, decided without I/O.

handlers/stream.py is the executor: it asks ``plan_stream`` what to do (which settings, which
pod, which step of a move), makes the broker calls the plan names, and asks ``report`` what they
came to (phase, Ready condition, Events, directory). Neither function does I/O nor imports kopf,
so tests/operator/test_plan.py covers every decision with tables. A move spans passes: START
(copy, record ``status.move``, name the new pod), then FINISH until the old pod has sealed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any

from . import names
from .builders.directory import Placed
from .conditions import set_condition
from .model import (
    MOVE_STREAMS,
    BrokerModel,
    Move,
    Phase,
    Placement,
    StreamModel,
    StreamStats,
    StreamStatus,
)
from .retention import KEYS as RETENTION_KEYS

#: The condition type this reconciler sets (the export sets its own, exports.py).
READY = "Ready"
#: Ready's reasons (the broker calls' failures are BrokerUnavailable / BrokerRefused).
BROKER_NOT_FOUND = "BrokerNotFound"
MOVE_PENDING = "MovePending"
MOVE_STALLED = "MoveStalled"
IMMUTABLE_FIELD_CHANGED = "ImmutableFieldChanged"
#: More copies asked for than the Broker has pods: not created until it has them.
NOT_ENOUGH_PODS = "NotEnoughPods"
STREAM_READY = "StreamReady"
#: Event reasons.
STREAM_MOVED = "StreamMoved"
STREAM_RECREATED = "StreamRecreated"
#: After this long waiting for the old pod to seal, the condition says the move is stalled.
MOVE_STALLED_S = 300
#: status.applied's keys, and the spec fields behind each.
IMMUTABLE_FIELDS = {"name": "spec.name", "broker": "spec.broker", "partitions": "spec.partitions",
                    "arguments": "spec.filterSizeBytes",
                    "replicas": "spec.replicas"}
#: The status fields the pass that starts a move writes at once (before naming the new pod).
MOVE_STARTED_FIELDS = ("phase", "placement", "leader", "move", "conditions")

Event = tuple[str, str]  # (reason, message)


def _fixed(applied: Mapping[str, Any], key: str) -> Any:
    """A setting as created; ``replicas`` absent is one copy (streams made before it); of the
    arguments, those retention does not change (retention.py applies a change as a policy)."""
    if key == "arguments":
        return _fixed_arguments(applied.get(key))
    return applied.get(key, 1) if key == "replicas" else applied.get(key)


def _fixed_arguments(arguments: Mapping[str, str] | None) -> dict[str, str] | None:
    if arguments is None:
        return None
    return {k: v for k, v in arguments.items() if k not in RETENTION_KEYS}


def resizable(created: int, wanted: int, partitions: int = 1) -> bool:
    """Whether a created stream's copies may change from ``created`` to ``wanted``: the
    placement driver adds or removes one member at a time. A single stream of one copy
    becomes a one-member replicated stream first (driver.py records it), and one shrunk to 1
    stays a one-member replicated stream; a super stream's partitions change only between
    counts above one."""
    if created < 1 or wanted < 1:
        return False
    return partitions <= 1 or (created > 1 and wanted > 1)


def immutable_changes(applied: Mapping[str, Any], wanted: Mapping[str, Any]) -> tuple[str, ...]:
    """The settings fixed at creation that the spec now changes, as the condition says them.
    An unset ``spec.replicas`` changes nothing: the Broker's default was taken at creation."""
    return tuple(f"{field} (was {_fixed(applied, key)!r}, now {_fixed(wanted, key)!r})"
                 for key, field in IMMUTABLE_FIELDS.items()
                 if (key != "replicas" or key in wanted)
                 and _fixed(applied, key) != _fixed(wanted, key))


@dataclass(frozen=True)
class Target:
    """The stream as it is (or is to be) on the broker."""

    stream: StreamModel
    arguments: dict[str, str]  # the Create arguments, initial-cluster-size aside
    applied: dict[str, Any]  # what status.applied records
    refused: tuple[str, ...] = ()  # spec changes of immutable settings, not applied
    #: copies of the stream; None: not known yet (unset in the spec, the Broker's default)
    replicas: int | None = None

    @property
    def create_arguments(self) -> dict[str, str]:
        """What the Create sends: ``initial-cluster-size`` for more than one copy (the pod that
        receives it places the other members among its peers and leads: client-local)."""
        if (self.replicas or 1) > 1:
            return {**self.arguments, "initial-cluster-size": str(self.replicas)}
        return dict(self.arguments)


def plan_target(stream: StreamModel, status: StreamStatus) -> Target:
    """Settings fixed at creation win over a changed spec; the change is refused, visibly."""
    wanted = stream.immutable()
    applied = status.applied
    if not applied:
        return Target(stream, stream.create_arguments(), wanted, replicas=stream.replicas)
    replicas = int(_fixed(applied, "replicas"))
    if "replicas" in wanted and resizable(replicas, int(wanted["replicas"]),
                                          int(applied.get("partitions") or 1)):
        replicas = int(wanted["replicas"])  # the placement driver changes the members
        applied = {**applied, "replicas": replicas}
    refused = immutable_changes(applied, wanted)
    if not refused:
        return Target(stream, stream.create_arguments(), applied, replicas=replicas)
    kept = StreamModel(name=stream.name, namespace=stream.namespace, stream=applied["name"],
                       broker=applied["broker"], partitions=int(applied["partitions"]),
                       deletion_policy=stream.deletion_policy, replicas=replicas)
    return Target(kept, dict(applied["arguments"]), applied, refused, replicas)


def resolve_replicas(target: Target, broker: BrokerModel) -> Target:
    """The copies of a stream not created yet (of each partition of a super stream): its
    spec, else the Broker's default. Recorded in ``applied`` when above one."""
    replicas = target.replicas
    if replicas is None:
        replicas = broker.default_replicas
    applied = {k: v for k, v in target.applied.items() if k != "replicas"}
    if replicas > 1:
        applied["replicas"] = replicas
    return replace(target, replicas=replicas, applied=applied)


def unplaceable(target: Target, broker: BrokerModel) -> Ready | None:
    """Why a stream not created yet cannot be: more copies than pods (refused, not capped: the
    Create places every member at once; a super stream's partitions each need as many). None:
    it can."""
    replicas = target.replicas or 1
    if replicas > broker.replicas:
        return Ready(False, NOT_ENOUGH_PODS,
                     f"replicas {replicas} needs as many pods; Broker {broker.name!r} has"
                     f" {broker.replicas}: not created until it has them (scale the Broker up,"
                     " or lower spec.replicas)")
    return None


class MoveStep(Enum):
    NONE = "none"
    #: on a pod being removed (MoveStreams): choose a new pod, create there, copy, record the
    #: move and its placement, then FINISH in the same pass
    START = "start"
    #: a move is recorded: once the old pod has sealed, copy the tail and delete the old stream
    FINISH = "finish"


@dataclass(frozen=True)
class StreamPlan:
    target: Target
    broker: BrokerModel | None  # None: it does not exist, so nothing is done but saying so
    ordinal: int | None = None  # the pod it is placed on; None: choose one
    move: MoveStep = MoveStep.NONE
    created: bool = False  # created on a broker before (status.applied is set)
    #: why it is not created this pass (no broker call is made): too few pods for its replicas
    waiting: Ready | None = None
    #: its members are the placement driver's (replicas above 1, or a record of its members,
    #: as a stream shrunk to one keeps): never moved by a copy
    replicated: bool = False


def plan_stream(stream: StreamModel, status: StreamStatus, broker: BrokerModel | None,
                target: Target | None = None, recorded: bool = False) -> StreamPlan:
    """What this pass does: on which pod, and which step of a move. ``recorded``: the
    placement driver holds a record of its members (status.replication)."""
    target = target or plan_target(stream, status)
    created = bool(status.applied)
    replicated = created and ((target.replicas or 1) > 1 or recorded)
    if broker is None:
        return StreamPlan(target, None, created=created, replicated=replicated)
    if not created:
        target = resolve_replicas(target, broker)
        waiting = unplaceable(target, broker)
        if waiting is not None:
            return StreamPlan(target, broker, waiting=waiting)
    placed = status.placement or ()
    if placed and not created and placed[0].ordinal >= broker.replicas:
        placed = ()  # placed on a pod being removed, never created there: place it anew
    ordinal = placed[0].ordinal if placed else None
    if status.move is not None:
        step = MoveStep.FINISH
    elif (ordinal is not None and created and ordinal >= broker.replicas
          and broker.scale_down_policy == MOVE_STREAMS
          # a replicated stream's members are moved by the placement driver, one at a time
          # (driver.py); the Broker keeps their pods until then (placement.members_held)
          and int((status.applied or {}).get("replicas") or 1) == 1 and not replicated):
        step = MoveStep.START
    else:
        step = MoveStep.NONE
    return StreamPlan(target, broker, ordinal, step, created, replicated=replicated)


@dataclass(frozen=True)
class Ready:
    """The Ready condition this pass sets."""

    status: bool
    reason: str
    message: str = ""


def placement_on(broker: BrokerModel, ordinal: int,
                 partitions: list[str]) -> tuple[Placement, ...]:
    """Every broker stream of a resource on pod ``ordinal`` (a super stream's partitions stay
    with it on one pod; a replicated one's until the placement driver names each
    partition's leader, ``driven_placement``)."""
    pod = names.pod(broker.name, ordinal)
    return tuple(Placement(p, pod, ordinal) for p in partitions)


def move_pending(move: Move, broker: BrokerModel, now: datetime) -> Ready:
    """Ready while the old pod has not sealed: pending, then stalled after MOVE_STALLED_S."""
    old, new = names.pod(broker.name, move.source), names.pod(broker.name, move.target)
    waited = int((now - move.started).total_seconds())
    if waited < MOVE_STALLED_S:
        return Ready(False, MOVE_PENDING,
                     f"moving to {new}: waiting for {old} to read the stream directory"
                     f" naming {new} and stop taking publishes ({waited} s)")
    return Ready(False, MOVE_STALLED,
                 f"moving to {new}: {old} has not sealed the stream after {waited} s;"
                 f" check that it mounts the directory ConfigMap"
                 f" {names.directory_configmap(broker.name)} and advertises the"
                 " address the directory names for it")


def with_ready(status: StreamStatus, ready: Ready, generation: int) -> StreamStatus:
    conditions = set_condition(list(status.conditions or ()), READY, ready.status, ready.reason,
                               ready.message, generation)
    return replace(status, conditions=tuple(conditions))


def start_move(plan: StreamPlan, status: StreamStatus, source: int, target: int,
               generation: int, now: datetime) -> StreamStatus:
    """The status recorded once the bulk is copied to pod ``target``: the new placement and
    the move. Not Ready from then on: the old pod takes publishes until it seals."""
    assert plan.broker is not None
    move = Move(source, target, now.replace(microsecond=0))
    moving = replace(status, phase=Phase.MOVING, leader=names.pod(plan.broker.name, target),
                     placement=placement_on(plan.broker, target,
                                            plan.target.stream.partition_names),
                     move=move)
    return with_ready(moving, move_pending(move, plan.broker, now), generation)


def driven_placement(plan: StreamPlan, status: StreamStatus) -> bool:
    """Whether the placement driver owns ``status.placement`` (a created replicated super
    stream: each partition's entry names its leader, driver.py writes them); a single
    replicated stream's one entry is the pod the reconciler talks to, as the driver wrote it."""
    return (plan.created and bool(status.placement) and plan.target.stream.partitions > 1
            and (plan.target.replicas or 1) > 1)


@dataclass(frozen=True)
class Outcome:
    """What the plan's broker calls came to."""

    ordinal: int  # the pod the stream is on now (a started move's new pod)
    move: Move | None = None  # the move still in progress
    finished: Move | None = None  # the move this pass finished
    copied: int = 0  # ... and the messages it copied after the switch
    created: bool = False  # the broker did not have the stream: created now
    stats: StreamStats | None = None
    failure: tuple[str, str] | None = None  # (reason, message) of the broker call that failed


@dataclass(frozen=True)
class Report:
    status: StreamStatus
    ready: Ready
    events: tuple[Event, ...] = ()  # warnings first
    repaired: str | None = None  # the stream had gone from its pod and was re-created empty
    directory: Placed | None = None  # a new placement for the stream directory


def report(plan: StreamPlan, status: StreamStatus, outcome: Outcome | None, generation: int,
           now: datetime) -> Report:
    """The status after the pass, from ``status`` (what it was, with a started move's fields),
    and the Events to post."""
    status = replace(status, observed_generation=generation)
    stream = plan.target.stream
    if plan.waiting is not None:
        return Report(with_ready(replace(status, phase=Phase.PENDING), plan.waiting, generation),
                      plan.waiting)
    if plan.broker is None or outcome is None:
        ready = Ready(False, BROKER_NOT_FOUND,
                      f"Broker {stream.broker!r} does not exist in namespace {stream.namespace}")
        return Report(with_ready(replace(status, phase=Phase.PENDING), ready, generation), ready)
    broker = plan.broker
    pod = names.pod(broker.name, outcome.ordinal)
    placement = placement_on(broker, outcome.ordinal, stream.partition_names)
    events: list[Event] = []
    if outcome.finished is not None:
        old = names.pod(broker.name, outcome.finished.source)
        events.append((STREAM_MOVED, f"{stream.stream} moved from {old} to {pod}"
                                     f" ({outcome.copied} messages copied after the switch)"))
    status = replace(status, move=outcome.move)

    if outcome.failure is not None:  # the broker's answer becomes the condition; timers retry
        reason, message = outcome.failure
        ready = Ready(False, reason, f"{pod}: {message}")
        status = replace(status, phase=Phase.DEGRADED if plan.created else Phase.PENDING,
                         leader=pod)
        if not plan.created:
            status = replace(status, placement=placement)
        return Report(with_ready(status, ready, generation), ready, tuple(events))

    if outcome.move is not None:  # usable on the new pod already; the old one has to seal
        ready = move_pending(outcome.move, broker, now)
        status = replace(status, phase=Phase.MOVING, leader=pod, placement=placement)
        return Report(with_ready(status, ready, generation), ready, tuple(events))

    repaired = None
    if outcome.created and plan.created and not events:
        repaired = f"{stream.stream} was missing on {pod}; re-created it (empty)"
        events.insert(0, (STREAM_RECREATED, repaired))
    stats = outcome.stats
    assert stats is not None
    before = Placed.from_status(status.fields())
    if driven_placement(plan, status):
        placement = status.placement or placement
    status = replace(status, phase=Phase.READY, leader=pod, partitions=stream.partitions,
                     placement=placement, applied=plan.target.applied,
                     first_offset=stats.first_offset, committed_offset=stats.committed_offset,
                     last_offset=stats.last_offset, size=stats.size)
    after = Placed.from_status(status.fields())
    if plan.target.refused:
        ready = Ready(False, IMMUTABLE_FIELD_CHANGED,
                      "refused: " + "; ".join(plan.target.refused) + ". The stream keeps its"
                      " original settings; delete and re-create the Stream to change them.")
    else:
        ready = Ready(True, STREAM_READY, f"{stream.stream} on {pod}")
    return Report(with_ready(status, ready, generation), ready, tuple(events), repaired,
                  after if after != before else None)
