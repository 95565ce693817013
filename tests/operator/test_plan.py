"""The Stream reconciler's decisions (streamlet_operator/plan.py), as tables: no API server,
no broker, no clock (each row says what time it is)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from streamlet_operator.brokers import StreamStats
from streamlet_operator.builders.directory import Placed
from streamlet_operator.model import (
    MOVE_STREAMS,
    BrokerModel,
    Move,
    Phase,
    Placement,
    StreamModel,
    StreamStatus,
)
from streamlet_operator.plan import (
    BROKER_NOT_FOUND,
    IMMUTABLE_FIELD_CHANGED,
    MOVE_PENDING,
    MOVE_STALLED,
    MOVE_STALLED_S,
    NOT_ENOUGH_PODS,
    STREAM_MOVED,
    STREAM_READY,
    STREAM_RECREATED,
    MoveStep,
    Outcome,
    Ready,
    StreamPlan,
    plan_stream,
    plan_target,
    report,
    start_move,
)

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
GEN = 3
STATS = StreamStats(first_offset=0, committed_offset=40, last_offset=42)


def stream(**spec: Any) -> StreamModel:
    return StreamModel.from_body({"metadata": {"name": "s", "namespace": "ns"},
                                  "spec": {"broker": "b", **spec}})


def broker(replicas: int = 2, policy: str = "Refuse", default_replicas: int | None = None
           ) -> BrokerModel:
    spec: dict[str, Any] = {"replicas": replicas, "scaleDownPolicy": policy}
    if default_replicas is not None:
        spec["streams"] = {"defaultReplicas": default_replicas}
    return BrokerModel.from_body({"metadata": {"name": "b", "namespace": "ns"}, "spec": spec})


def on(ordinal: int, *partitions: str) -> tuple[Placement, ...]:
    return tuple(Placement(p, f"b-{ordinal}", ordinal) for p in partitions or ("s",))


def created(ordinal: int, **fields: Any) -> StreamStatus:
    """The status of ``stream()`` created and Ready on pod ``ordinal``."""
    return replace(StreamStatus(phase=Phase.READY, leader=f"b-{ordinal}", partitions=1,
                                placement=on(ordinal), applied=stream().immutable()), **fields)


MOVE = Move(source=1, target=0, started=NOW - timedelta(seconds=10))


def ready_of(status: StreamStatus) -> dict[str, Any]:
    return next(c for c in status.conditions or () if c["type"] == "Ready")


# --- which settings: the spec, or those fixed at creation --------------------------------

@pytest.mark.parametrize(("spec", "applied", "broker_name", "arguments", "refused"), [
    pytest.param({}, None, "b", {}, (), id="new: the spec"),
    pytest.param({"retention": {"maxAge": "1D"}}, None, "b", {"max-age": "1D"}, (),
                 id="new with retention: its arguments"),
    pytest.param({}, stream().immutable(), "b", {}, (), id="created, spec unchanged"),
    pytest.param({"retention": {"maxAge": "2D"}}, stream(retention={"maxAge": "1D"}).immutable(),
                 "b", {"max-age": "2D"}, (),
                 id="retention changed: taken (applied as a policy), applied keeps the created"),
    pytest.param({"filterSizeBytes": 64}, stream(filterSizeBytes=32).immutable(),
                 "b", {"stream-filter-size-bytes": "32"}, ("spec.filterSizeBytes",),
                 id="filter size changed: refused, the created one kept"),
    pytest.param({"broker": "other"}, stream().immutable(), "b", {}, ("spec.broker",),
                 id="another broker: refused, never moved there"),
    pytest.param({"partitions": 3}, stream().immutable(), "b", {}, ("spec.partitions",),
                 id="partitions changed: refused"),
])
def test_target(spec: dict[str, Any], applied: dict[str, Any] | None, broker_name: str,
                arguments: dict[str, str], refused: tuple[str, ...]) -> None:
    target = plan_target(stream(**spec), StreamStatus(applied=applied))
    assert target.stream.broker == broker_name
    assert target.arguments == arguments
    assert target.applied == (applied or stream(**spec).immutable())
    assert tuple(r.split(" ")[0] for r in target.refused) == refused
    if refused:
        assert target.stream.partitions == 1 and target.stream.stream == "s"


def test_a_refusal_names_both_values() -> None:
    target = plan_target(stream(filterSizeBytes=64, retention={"maxAge": "2D"}),
                         StreamStatus(applied=stream(filterSizeBytes=32,
                                                     retention={"maxAge": "1D"}).immutable()))
    assert "'32'" in target.refused[0] and "'64'" in target.refused[0]
    assert "max-age" not in target.refused[0]  # retention may change


# --- how many copies: spec.replicas, the Broker's default; changed between counts above 1 ---

@pytest.mark.parametrize(("spec", "applied", "model", "replicas", "size", "recorded"), [
    pytest.param({}, None, broker(3), 1, None, None, id="new, no default: one copy"),
    pytest.param({"replicas": 3}, None, broker(3), 3, "3", 3, id="new with replicas 3"),
    pytest.param({}, None, broker(3, default_replicas=3), 3, "3", 3,
                 id="new, unset: the Broker's default"),
    pytest.param({"replicas": 1}, None, broker(3, default_replicas=3), 1, None, None,
                 id="new, replicas 1 over a default of 3"),
    pytest.param({"partitions": 2}, None, broker(3, default_replicas=3), 3, "3", 3,
                 id="new super stream, unset: the Broker's default for each partition"),
    pytest.param({"partitions": 3, "replicas": 3}, None, broker(3), 3, "3", 3,
                 id="new super stream with replicas 3: each partition replicated"),
    pytest.param({"partitions": 3}, None, broker(3), 1, None, None,
                 id="new super stream, no default: one copy per partition"),
    pytest.param({}, {**stream().immutable(), "replicas": 3}, broker(3), 3, "3", 3,
                 id="created with 3: a re-create asks for 3 again"),
    pytest.param({}, stream().immutable(), broker(3, default_replicas=3), 1, None, None,
                 id="created with one copy: a later Broker default changes nothing"),
    pytest.param({"replicas": 3}, {**stream().immutable(), "replicas": 3}, broker(3), 3, "3", 3,
                 id="created with 3, spec says 3"),
])
def test_replicas(spec: dict[str, Any], applied: dict[str, Any] | None, model: BrokerModel,
                  replicas: int, size: str | None, recorded: int | None) -> None:
    status = StreamStatus(applied=applied, placement=on(0) if applied else None)
    plan = plan_stream(stream(**spec), status, model)
    assert plan.waiting is None and not plan.target.refused
    assert plan.target.replicas == replicas
    assert plan.target.create_arguments.get("initial-cluster-size") == size
    assert plan.target.applied.get("replicas") == recorded
    assert "initial-cluster-size" not in plan.target.arguments  # not in applied.arguments


@pytest.mark.parametrize(("spec", "created", "now"), [
    pytest.param({"replicas": 5}, 3, 5, id="3 to 5"),
    pytest.param({"replicas": 2}, 3, 2, id="3 to 2"),
    pytest.param({}, 3, 3, id="unset: as created"),
    pytest.param({"replicas": 3}, 1, 3, id="one copy to 3: replicated first"),
    pytest.param({"replicas": 1}, 3, 1, id="3 to 1: a one-member replicated stream"),
])
def test_a_replicated_stream_s_replicas_change(spec: dict[str, Any], created: int,
                                               now: int) -> None:
    """The placement driver adds or removes members to match: applied records the count."""
    applied = {**stream().immutable(), **({"replicas": created} if created > 1 else {})}
    plan = plan_stream(stream(**spec), StreamStatus(applied=applied, placement=on(0)), broker(5))
    assert plan.target.refused == ()
    assert plan.target.replicas == now and plan.target.applied["replicas"] == now
    result = report(plan, StreamStatus(applied=applied, placement=on(0)),
                    Outcome(0, stats=STATS), GEN, NOW)
    assert result.status.applied is not None and result.status.applied["replicas"] == now
    assert ready_of(result.status)["reason"] == STREAM_READY


SUPER = stream(partitions=2).immutable()


@pytest.mark.parametrize(("spec", "applied", "refused"), [
    pytest.param({"replicas": 3, "partitions": 2}, SUPER, "spec.replicas (was 1, now 3)",
                 id="set on a super stream created with one copy"),
    pytest.param({"replicas": 1, "partitions": 2}, {**SUPER, "replicas": 3},
                 "spec.replicas (was 3, now 1)", id="a replicated super stream to one copy"),
])
def test_a_super_stream_s_replicas_cross_one_only_at_creation(
        spec: dict[str, Any], applied: dict[str, Any], refused: str) -> None:
    """Its partitions' members change between counts above one only."""
    plan = plan_stream(stream(**spec), StreamStatus(applied=applied, placement=on(0)), broker(5))
    assert plan.target.refused == (refused,)
    assert plan.target.replicas == (applied.get("replicas") or 1)
    assert plan.target.create_arguments.get("initial-cluster-size") == (
        None if plan.target.replicas == 1 else str(plan.target.replicas))
    result = report(plan, StreamStatus(applied=applied, placement=on(0)),
                    Outcome(0, stats=STATS), GEN, NOW)
    assert ready_of(result.status)["reason"] == IMMUTABLE_FIELD_CHANGED
    assert result.status.applied == applied


@pytest.mark.parametrize(("spec", "model", "reason", "words"), [
    pytest.param({"replicas": 3}, broker(2), NOT_ENOUGH_PODS, "replicas 3 needs as many pods;"
                 " Broker 'b' has 2", id="3 copies on 2 pods"),
    pytest.param({}, broker(1, default_replicas=3), NOT_ENOUGH_PODS, "has 1",
                 id="the default on too few pods"),
    pytest.param({"replicas": 3, "partitions": 2}, broker(2), NOT_ENOUGH_PODS,
                 "replicas 3 needs as many pods", id="replicated super stream on 2 pods"),
])
def test_a_stream_that_cannot_have_its_copies_waits(spec: dict[str, Any], model: BrokerModel,
                                                    reason: str, words: str) -> None:
    """Refused, not capped: no broker call, Pending with the reason, until the Broker has the
    pods (members cannot be added to a stream later)."""
    plan = plan_stream(stream(**spec), StreamStatus(), model)
    assert plan.waiting is not None and plan.waiting.reason == reason
    result = report(plan, StreamStatus(), None, GEN, NOW)
    assert result.status.phase == Phase.PENDING and result.status.applied is None
    ready = ready_of(result.status)
    assert ready["status"] == "False" and ready["reason"] == reason and words in ready["message"]
    assert result.directory is None


def test_a_created_stream_is_kept_when_the_broker_shrinks_below_its_replicas() -> None:
    applied = {**stream().immutable(), "replicas": 3}
    plan = plan_stream(stream(), StreamStatus(applied=applied, placement=on(0)), broker(2))
    assert plan.waiting is None and plan.ordinal == 0 and plan.target.replicas == 3


# A replicated super stream: the placement driver names each partition's leader in its
# placement entry; the reconciler's pass keeps them (the Create's pod for all until then).
SUPER_PLACED = (Placement("s-0", "b-1", 1), Placement("s-1", "b-2", 2), Placement("s-2", "b-0", 0))


@pytest.mark.parametrize(("spec", "status", "expected"), [
    pytest.param({"partitions": 3, "replicas": 3}, StreamStatus(),
                 tuple(Placement(f"s-{i}", "b-0", 0) for i in range(3)),
                 id="replicated super stream created: all on the Create's pod until driven"),
    pytest.param({"partitions": 3, "replicas": 3},
                 StreamStatus(applied={**stream(partitions=3).immutable(), "replicas": 3},
                              placement=SUPER_PLACED),
                 SUPER_PLACED, id="replicated super stream driven: each partition's leader kept"),
    pytest.param({"partitions": 3, "replicas": 1},
                 StreamStatus(applied=stream(partitions=3).immutable(), placement=SUPER_PLACED),
                 tuple(Placement(f"s-{i}", "b-1", 1) for i in range(3)),
                 id="one copy per partition: all on its pod"),
    pytest.param({"replicas": 3},
                 StreamStatus(applied={**stream().immutable(), "replicas": 3},
                              placement=(Placement("s", "b-2", 2),)),
                 (Placement("s", "b-2", 2),), id="a single replicated stream: its leader"),
])
def test_placement_reported(spec: dict[str, Any], status: StreamStatus,
                            expected: tuple[Placement, ...]) -> None:
    plan = plan_stream(stream(**spec), status, broker(3))
    ordinal = plan.ordinal if plan.ordinal is not None else 0
    result = report(plan, status, Outcome(ordinal, created=not plan.created, stats=STATS), GEN,
                    NOW)
    assert result.status.placement == expected
    assert result.status.leader == expected[0].pod


# --- where, and which step of a move -----------------------------------------------------

@pytest.mark.parametrize(("status", "model", "ordinal", "step"), [
    pytest.param(StreamStatus(), broker(), None, MoveStep.NONE, id="new: placed by the executor"),
    pytest.param(created(1), broker(), 1, MoveStep.NONE, id="created: stays on its pod"),
    pytest.param(StreamStatus(placement=on(1)), broker(), 1, MoveStep.NONE,
                 id="placed, never created: keeps its pod"),
    pytest.param(StreamStatus(placement=on(1)), broker(1), None, MoveStep.NONE,
                 id="placed on a pod being removed, never created: placed anew"),
    pytest.param(created(1), broker(1), 1, MoveStep.NONE,
                 id="on a pod being removed, Refuse: stays (the Broker keeps the pod)"),
    pytest.param(created(1), broker(1, MOVE_STREAMS), 1, MoveStep.START,
                 id="on a pod being removed, MoveStreams: a move starts"),
    pytest.param(created(0), broker(1, MOVE_STREAMS), 0, MoveStep.NONE,
                 id="MoveStreams, on a pod that stays: no move"),
    pytest.param(replace(created(1), applied={**stream().immutable(), "replicas": 3}),
                 broker(1, MOVE_STREAMS), 1, MoveStep.NONE,
                 id="replicated, led from a pod being removed, MoveStreams: no move"),
    pytest.param(created(0, phase=Phase.MOVING, move=MOVE), broker(1, MOVE_STREAMS), 0,
                 MoveStep.FINISH, id="a move recorded: finish it"),
    pytest.param(created(0, phase=Phase.MOVING, move=MOVE), broker(2), 0, MoveStep.FINISH,
                 id="a move recorded, whatever the Broker says now: finish it"),
])
def test_plan(status: StreamStatus, model: BrokerModel, ordinal: int | None,
              step: MoveStep) -> None:
    plan = plan_stream(stream(), status, model)
    assert (plan.broker, plan.ordinal, plan.move) == (model, ordinal, step)
    assert plan.created == bool(status.applied)


@pytest.mark.parametrize(("status", "spec", "recorded", "replicated", "step"), [
    pytest.param(created(1), {}, False, False, MoveStep.START, id="one copy: moved by a copy"),
    pytest.param(created(1), {"replicas": 1}, True, True, MoveStep.NONE,
                 id="shrunk to one member, its record kept: the driver moves it"),
    pytest.param(created(1), {"replicas": 3}, False, True, MoveStep.NONE,
                 id="one copy asked to grow, not recorded yet: the driver's"),
    pytest.param(StreamStatus(), {}, True, False, MoveStep.NONE, id="not created: neither"),
])
def test_a_stream_with_a_record_of_its_members_is_the_driver_s(
        status: StreamStatus, spec: dict[str, Any], recorded: bool, replicated: bool,
        step: MoveStep) -> None:
    """On a pod being removed with MoveStreams: a stream the placement driver records (or is
    about to) is never moved by a copy, whatever its replicas."""
    plan = plan_stream(stream(**spec), status, broker(1, MOVE_STREAMS), recorded=recorded)
    assert (plan.replicated, plan.move) == (replicated, step)


def test_no_broker_no_plan() -> None:
    plan = plan_stream(stream(), created(1), None)
    assert plan.broker is None and plan.ordinal is None and plan.move is MoveStep.NONE


# --- what the status says after the broker calls -----------------------------------------

def planned(status: StreamStatus, model: BrokerModel | None = None, **spec: Any) -> StreamPlan:
    return plan_stream(stream(**spec), status, model if model is not None else broker())


@pytest.mark.parametrize(("status", "outcome", "phase", "ready", "events"), [
    pytest.param(StreamStatus(), Outcome(0, created=True, stats=STATS), Phase.READY,
                 (True, STREAM_READY, "s on b-0"), (), id="new, created: Ready"),
    pytest.param(created(1), Outcome(1, stats=STATS), Phase.READY,
                 (True, STREAM_READY, "s on b-1"), (), id="created before, still there: Ready"),
    pytest.param(created(1), Outcome(1, created=True, stats=STATS), Phase.READY,
                 (True, STREAM_READY, "s on b-1"), (STREAM_RECREATED,),
                 id="gone from its pod: re-created, a warning"),
    pytest.param(StreamStatus(), Outcome(0, failure=("BrokerUnavailable", "pod b-0 is down")),
                 Phase.PENDING, (False, "BrokerUnavailable", "b-0: pod b-0 is down"), (),
                 id="new, pod down: Pending"),
    pytest.param(created(1), Outcome(1, failure=("BrokerRefused", "ACCESS_REFUSED: no")),
                 Phase.DEGRADED, (False, "BrokerRefused", "b-1: ACCESS_REFUSED: no"), (),
                 id="created before, pod refuses: Degraded"),
    pytest.param(created(0, move=MOVE), Outcome(0, move=MOVE, stats=STATS), Phase.MOVING,
                 (False, MOVE_PENDING, "moving to b-0: waiting for b-1 to read the stream"
                                       " directory naming b-0 and stop taking publishes (10 s)"),
                 (), id="old pod not sealed yet: Moving, pending"),
    pytest.param(created(0, move=replace(MOVE, started=NOW - timedelta(seconds=MOVE_STALLED_S))),
                 Outcome(0, move=replace(MOVE, started=NOW - timedelta(seconds=MOVE_STALLED_S)),
                         stats=STATS),
                 Phase.MOVING, (False, MOVE_STALLED, None), (), id="not sealed for long: stalled"),
    pytest.param(created(0, move=MOVE), Outcome(0, finished=MOVE, copied=7, stats=STATS),
                 Phase.READY, (True, STREAM_READY, "s on b-0"), (STREAM_MOVED,),
                 id="sealed: moved, Ready"),
    pytest.param(created(0, move=MOVE),
                 Outcome(0, finished=MOVE, copied=7, created=True, stats=STATS), Phase.READY,
                 (True, STREAM_READY, "s on b-0"), (STREAM_MOVED,),
                 id="moved: created on the new pod is no repair"),
    pytest.param(created(0, move=MOVE),
                 Outcome(0, finished=MOVE, copied=7, failure=("BrokerUnavailable", "down")),
                 Phase.DEGRADED, (False, "BrokerUnavailable", "b-0: down"), (STREAM_MOVED,),
                 id="moved, then the new pod fails: Degraded, still reported moved"),
    pytest.param(created(0, move=MOVE), Outcome(0, move=MOVE, failure=("BrokerUnavailable", "x")),
                 Phase.DEGRADED, (False, "BrokerUnavailable", "b-0: x"), (),
                 id="move not finished, pod fails: Degraded, the move kept"),
])
def test_report(status: StreamStatus, outcome: Outcome, phase: Phase,
                ready: tuple[bool, str, str | None], events: tuple[str, ...]) -> None:
    result = report(planned(status), status, outcome, GEN, NOW)
    st = result.status
    assert st.phase == phase and st.observed_generation == GEN
    assert st.leader == f"b-{outcome.ordinal}"
    assert st.move == outcome.move
    ok, reason, message = ready
    assert (result.ready.status, result.ready.reason) == (ok, reason)
    if message is not None:
        assert result.ready.message == message
    cond = ready_of(st)
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "True" if ok else "False", reason, result.ready.message)
    assert cond["observedGeneration"] == GEN
    assert tuple(reason for reason, _ in result.events) == events
    assert (result.repaired is not None) == (STREAM_RECREATED in events)
    if phase in (Phase.READY, Phase.MOVING) or not status.applied:
        assert st.placement == on(outcome.ordinal)
    else:  # a created stream's placement is not rewritten by a failing pass
        assert st.placement == status.placement
    if phase is Phase.READY:
        assert (st.first_offset, st.committed_offset, st.last_offset, st.size) == (0, 40, 42, 40)
        assert st.applied == stream().immutable() and st.partitions == 1
    else:
        assert st.first_offset == status.first_offset and st.applied == status.applied


def test_moved_event_names_both_pods() -> None:
    status = created(0, move=MOVE)
    result = report(planned(status), status, Outcome(0, finished=MOVE, copied=7, stats=STATS),
                    GEN, NOW)
    assert result.events == ((STREAM_MOVED,
                              "s moved from b-1 to b-0 (7 messages copied after the switch)"),)


def test_a_missing_broker_leaves_the_rest_of_the_status() -> None:
    status = created(1, first_offset=5)
    result = report(plan_stream(stream(), status, None), status, None, GEN, NOW)
    assert result.status.phase == Phase.PENDING
    assert result.ready == Ready(False, BROKER_NOT_FOUND,
                                 "Broker 'b' does not exist in namespace ns")
    assert result.events == () and result.directory is None
    assert replace(result.status, phase=status.phase, conditions=None,
                   observed_generation=None) == status


def test_a_refused_change_keeps_the_stream_but_is_not_ready() -> None:
    status = created(1)
    plan = planned(status, filterSizeBytes=64)
    result = report(plan, status, Outcome(1, stats=STATS), GEN, NOW)
    assert result.status.phase == Phase.READY
    assert result.status.applied == stream().immutable()
    assert result.ready.reason == IMMUTABLE_FIELD_CHANGED and not result.ready.status
    assert "delete and re-create the Stream" in result.ready.message


@pytest.mark.parametrize(("status", "outcome", "directory"), [
    pytest.param(StreamStatus(), Outcome(0, created=True, stats=STATS),
                 Placed("s", 1, (("s", 0),)), id="first created: named in the directory"),
    pytest.param(created(1), Outcome(1, stats=STATS), None, id="unchanged: no write"),
    pytest.param(created(1, move=MOVE), Outcome(0, finished=MOVE, stats=STATS),
                 Placed("s", 1, (("s", 0),)), id="moved: the new pod named"),
    pytest.param(StreamStatus(), Outcome(0, failure=("BrokerUnavailable", "x")), None,
                 id="not created: not named"),
])
def test_directory(status: StreamStatus, outcome: Outcome, directory: Placed | None) -> None:
    assert report(planned(status), status, outcome, GEN, NOW).directory == directory


def test_a_super_stream_keeps_its_partitions_on_one_pod() -> None:
    result = report(planned(StreamStatus(), partitions=3), StreamStatus(),
                    Outcome(2, created=True, stats=STATS), GEN, NOW)
    assert result.status.placement == on(2, "s-0", "s-1", "s-2")
    assert result.status.partitions == 3
    assert result.directory == Placed("s", 3, (("s-0", 2), ("s-1", 2), ("s-2", 2)))


def test_starting_a_move_records_it_and_is_not_ready() -> None:
    status = created(1, conditions=({"type": "Ready", "status": "True", "reason": STREAM_READY,
                                     "message": "", "lastTransitionTime": "x"},))
    plan = planned(status, broker(1, MOVE_STREAMS))
    assert plan.move is MoveStep.START
    moving = start_move(plan, status, source=1, target=0, generation=GEN,
                        now=NOW + timedelta(microseconds=5))
    assert moving.phase == Phase.MOVING and moving.leader == "b-0"
    assert moving.placement == on(0)
    assert moving.move == Move(1, 0, NOW)
    cond = ready_of(moving)
    assert (cond["status"], cond["reason"]) == ("False", MOVE_PENDING)
    assert cond["lastTransitionTime"] != "x"  # Ready went False
    # The same pass then finishes (or not): its report keeps the new placement.
    result = report(plan, moving, Outcome(0, move=moving.move, stats=STATS), GEN, NOW)
    assert result.status.phase == Phase.MOVING and result.status.placement == on(0)


# --- the status as the API holds it ------------------------------------------------------

FULL = {"observedGeneration": 2, "phase": "Moving", "leader": "b-0", "partitions": 1,
        "placement": [{"stream": "s", "pod": "b-0", "ordinal": 0}],
        "applied": {"name": "s", "broker": "b", "partitions": 1, "arguments": {}},
        "move": {"from": 1, "to": 0, "started": "2026-01-01T11:59:50Z"},
        "firstOffset": 0, "committedOffset": 4, "lastOffset": 5, "size": 4,
        "conditions": [{"type": "Ready", "status": "False", "reason": MOVE_PENDING}],
        "export": {"lastRun": "x"}}


@pytest.mark.parametrize("raw", [
    pytest.param(FULL, id="every field"),
    pytest.param({}, id="empty"),
    pytest.param({"placement": [], "conditions": []}, id="empty lists stay lists"),
    pytest.param({**FULL, "move": None}, id="a move dropped before"),
])
def test_status_round_trip(raw: dict[str, Any]) -> None:
    assert StreamStatus.from_status(raw).to_status(raw) == raw


def test_status_fields_parse() -> None:
    st = StreamStatus.from_status(FULL)
    assert st.move == MOVE and st.placement == on(0) and st.phase == Phase.MOVING


@pytest.mark.parametrize(("base", "expected"), [
    pytest.param(FULL, {**FULL, "move": None}, id="a finished move is written as null"),
    pytest.param({"phase": "Ready"}, {"phase": "Ready"}, id="no move, none written"),
])
def test_unset_fields(base: dict[str, Any], expected: dict[str, Any]) -> None:
    st = replace(StreamStatus.from_status(base), move=None)
    assert st.to_status(base) == expected


@pytest.mark.process
def test_the_plan_imports_no_kopf_and_no_io() -> None:
    """plan.py decides; the handlers act. A fresh interpreter, as kopf is loaded here."""
    code = ("import sys, streamlet_operator.plan; "
            "print(sorted(m for m in ('kopf', 'asyncio', 'aiohttp', 'socket',"
            " 'streamlet_operator.brokers', 'streamlet_operator.kube') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
