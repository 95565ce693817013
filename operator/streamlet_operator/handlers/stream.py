"""Stream reconciler: place the stream on a broker pod, create it there, report, repair, delete.

The decisions are plan.py's (pure, tested with tables); this module makes the calls they name.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kopf

from .. import day2, drain, names, retention
from ..brokers import BrokerSession, BrokerUnavailable
from ..builders.directory import Placed
from ..constants import GROUP, VERSION
from ..directory import sync_directory
from ..exports import FAILED, INVALID, reconcile_export
from ..failover import members_of
from ..metrics import DRIFT_REPAIRS, MOVES, instrumented
from ..model import BrokerModel, Move, Placement, StreamModel, StreamStats, StreamStatus
from ..moves import copy_stream, sealed
from ..placement import place, stream_counts
from ..plan import (
    MOVE_STARTED_FIELDS,
    STREAM_RECREATED,
    Event,
    MoveStep,
    Outcome,
    StreamPlan,
    plan_stream,
    plan_target,
    report,
    start_move,
)
from ..runtime import Runtime
from ..settings import SETTINGS
from .common import Logger, pause_pass, placements, resumed, runtime_of, write_status

RESOURCE = (GROUP, VERSION, "streams")
WARNINGS = frozenset({STREAM_RECREATED, INVALID, FAILED})
log = logging.getLogger(__name__)


@kopf.index(*RESOURCE)
def stream_placements(*, namespace: str | None, name: str, spec: kopf.Spec,
                      status: kopf.Status, **_: Any) -> dict[tuple[str, str], dict[str, list[int]]]:
    """(namespace, broker) -> {stream resource: pod ordinal of each broker stream}."""
    st = StreamStatus.from_status(status)
    broker = (st.applied or {}).get("broker") or spec.get("broker", "")
    ordinals = [p.ordinal for p in st.placement or ()]
    if st.move:  # the old pod still holds the stream until the move finishes: keep it running
        ordinals.append(st.move.source)
    return {(namespace or "", broker): {name: ordinals}}


@contextlib.asynccontextmanager
async def _session(runtime: Runtime, broker: BrokerModel,
                   ordinal: int) -> AsyncIterator[BrokerSession]:
    address, tls = await runtime.broker_address(broker, ordinal)
    user, password = await runtime.broker_credentials(broker.namespace, broker.name)
    async with runtime.admin.session(address, user, password, tls) as session:
        yield session


def _failure(exc: BaseException) -> tuple[str, str]:
    """A condition reason and message for a failed broker call."""
    lost = type(exc).__name__ == "ConnectionClosed"  # streamlet.client: the pod went away
    if lost or isinstance(exc, BrokerUnavailable | OSError | TimeoutError):
        return "BrokerUnavailable", str(exc) or type(exc).__name__
    code = getattr(exc, "code", None)
    return "BrokerRefused", f"{getattr(code, 'name', code)}: {exc}"


async def _drained(runtime: Runtime, broker: dict[str, Any]) -> frozenset[int]:
    """The Broker's drained pods (drain.py): its annotation, and its Pods' (listed each pass
    that needs them: a Pod annotation is the drain's usual switch, and not watched here)."""
    meta = broker["metadata"]
    pods = await runtime.kube.list("Pod", meta.get("namespace") or "default",
                                   labels=names.selector(meta["name"]))
    prefix = f"{meta['name']}-"
    by_ordinal = {int(p["metadata"]["name"].removeprefix(prefix)):
                  dict(p["metadata"].get("annotations") or {}) for p in pods
                  if p["metadata"]["name"].removeprefix(prefix).isdigit()}
    return drain.requested(dict(meta.get("annotations") or {}), by_ordinal).ordinals


async def _choose_pod(runtime: Runtime, index: Any, stream: StreamModel,
                      broker: BrokerModel, drained: frozenset[int] = frozenset()) -> int:
    async with runtime.placement_lock:
        held = placements(index, runtime, stream.namespace, broker.name)
        held.pop(stream.name, None)
        ordinal = place(stream_counts(held.values(), broker.replicas), stream.partitions,
                        avoid=drained)
        # A super stream's partitions live with it on one pod: each counts as a stream.
        runtime.recent[(stream.namespace, broker.name)][stream.name] = [ordinal] * stream.partitions
        return ordinal


async def _start_move(runtime: Runtime, index: Any, plan: StreamPlan, source: int,
                      status: StreamStatus, gen: int, drained: frozenset[int] = frozenset()
                      ) -> tuple[StreamStatus, dict[str, Any]]:
    """Start moving the stream off pod ``source`` (being removed, or drained); return the new
    status and the fields written (``move`` among them). The new pod is not a drained one.

    Copy, then record the new placement and the move in progress (``status.move``), then name
    the new pod in the directory: the old pod seals its stream when it reads that, and
    ``_finish_move`` (this pass or a later one) copies the rest and deletes the old stream.
    """
    stream, arguments, broker = plan.target.stream, plan.target.arguments, plan.broker
    assert broker is not None
    async with runtime.placement_lock:
        held = placements(index, runtime, stream.namespace, broker.name)
        held.pop(stream.name, None)
        target = place(stream_counts(held.values(), broker.replicas), stream.partitions,
                       avoid=drained | {source})
    partitions = stream.partition_names
    async with _session(runtime, broker, source) as old, _session(runtime, broker, target) as new:
        if not await _create(new, stream, arguments):
            # Left by a move that failed half-way (the status still points at the old pod).
            await _delete(new, stream)
            await _create(new, stream, arguments)
        for partition in partitions:  # the bulk, while producers go on: the rest comes later
            await copy_stream(old, new, partition, follow=False)
    # Recorded before the directory names the new pod: a restarted operator resumes the move,
    # and no repair ever re-creates the old stream. Not Ready from this write on: the old pod
    # takes publishes until it seals (the Ready=True of before would outlive this pass).
    moving = start_move(plan, status, source, target, gen, datetime.now(UTC))
    fields = moving.fields()
    written = {key: fields[key] for key in MOVE_STARTED_FIELDS}
    await runtime.kube.patch("Stream", stream.namespace, stream.name, {"status": written},
                             subresource="status")
    runtime.recent[(stream.namespace, broker.name)][stream.name] = [target] * len(partitions) + [
        source]
    return moving, written


async def _finish_move(runtime: Runtime, stream: StreamModel, broker: BrokerModel,
                       move: Move) -> int | None:
    """Finish a move once the old pod has sealed its stream; return the messages copied since
    it started, or None if the old pod has not sealed yet (a later pass tries again)."""
    partitions = stream.partition_names
    # (Again) name the new pod: the old pod seals when it reads this.
    await sync_directory(runtime, broker, {stream.name: Placed(
        stream.stream, stream.partitions, tuple((p, move.target) for p in partitions))})
    async with _session(runtime, broker, move.source) as old, \
            _session(runtime, broker, move.target) as new:
        if not await sealed(old, partitions):
            return None
        copied = 0  # the tail: what the old pod confirmed after the first copy, now final
        for partition in partitions:
            if await old.stream_exists(partition):
                copied += await copy_stream(old, new, partition)
        await _delete(old, stream)
    runtime.recent[(stream.namespace, broker.name)][stream.name] = [move.target] * len(partitions)
    MOVES.labels(stream.namespace).inc()
    return copied


async def _create(session: BrokerSession, stream: StreamModel, arguments: dict[str, str]) -> bool:
    if stream.partitions > 1:
        return await session.create_super_stream(stream.stream, stream.partition_names, arguments)
    return await session.create_stream(stream.stream, arguments)


async def _delete(session: BrokerSession, stream: StreamModel) -> bool:
    if stream.partitions > 1:
        return await session.delete_super_stream(stream.stream, stream.partition_names)
    return await session.delete_stream(stream.stream)


async def _stats(session: BrokerSession, partitions: list[str],
                 replicated: bool = False) -> StreamStats:
    """The first partition's stats; of a ``replicated`` super stream the first one this pod
    holds (a pod holds only the partitions it has members of), else the first's (its
    error)."""
    if replicated and len(partitions) > 1:
        for partition in partitions:
            if await session.stream_exists(partition):
                return await session.stream_stats(partition)
    return await session.stream_stats(partitions[0])


async def reconcile_stream(body: dict[str, Any], runtime: Runtime, index: Any,
                           logger: Logger) -> tuple[dict[str, Any], list[Event]]:
    """Place and create one Stream (again, if it went missing), then its scheduled export.

    Returns its new status, and Events to post: (reason, message), warnings first.
    """
    status, events = await _reconcile_on_broker(body, runtime, index, logger)
    # The export is a schedule on Kubernetes, independent of the broker's state right now.
    gen = int(body["metadata"].get("generation") or 0)
    events += await reconcile_export(body, runtime.kube, status, gen)
    return status, events


async def _reconcile_on_broker(body: dict[str, Any], runtime: Runtime, index: Any,
                               logger: Logger) -> tuple[dict[str, Any], list[Event]]:
    """Gather the facts, run plan.py's plan, make its broker calls, write what they came to."""
    stream = StreamModel.from_body(body)
    status = StreamStatus.from_status(body.get("status"))
    gen = int(body["metadata"].get("generation") or 0)
    target = plan_target(stream, status)
    broker_body = await runtime.kube.get("Broker", stream.namespace, target.stream.broker)
    found = BrokerModel.from_body(broker_body) if broker_body is not None else None
    plan = plan_stream(stream, status, found, target,
                       recorded=members_of(body.get("status")) is not None)
    broker = plan.broker
    if broker is None or plan.waiting is not None:  # no broker call this pass
        result = report(plan, status, None, gen, datetime.now(UTC))
        return result.status.to_status(body.get("status")), []

    assert broker_body is not None
    drained = await _drained(runtime, broker_body)
    if plan.move is MoveStep.NONE and not plan.replicated and drain.must_move(
            plan.ordinal, drained, created=plan.created, replicas=target.replicas or 1,
            moving=status.move is not None, pods=broker.replicas):
        plan = replace(plan, move=MoveStep.START)  # off a drained pod, whatever the policy
    ordinal = plan.ordinal
    if ordinal is None:
        ordinal = await _choose_pod(runtime, index, target.stream, broker, drained)
    move, finished, copied = status.move, None, 0
    created, stats, failure = False, None, None
    kept = (body.get("status") or {}).get("retention")  # status.retention as it stands
    try:
        if plan.move is MoveStep.START:
            status, written = await _start_move(runtime, index, plan, ordinal, status, gen,
                                                drained)
            # The pass's status is written as a change from this: a field set back to what it
            # was before the move (phase Ready, no move) must be written too.
            body["status"] = {**(body.get("status") or {}), **written}
            move = status.move
            assert move is not None
            ordinal = move.target
        if move:
            done = await _finish_move(runtime, target.stream, broker, move)
            if done is not None:
                move, finished, copied = None, move, done
        async with _session(runtime, broker, ordinal) as session:
            created = await _create(session, plan.target.stream,
                                    plan.target.create_arguments)
            stats = await _stats(session, plan.target.stream.partition_names,
                                 (plan.target.replicas or 1) > 1)
        if not plan.target.refused:
            kept = await _apply_retention(runtime, broker, plan.target.stream,
                                          plan.target.applied, kept)
    except Exception as e:  # the broker's answer becomes the condition; the timer retries
        failure = _failure(e)
        log.warning("%s/%s: %r on %s: %s", stream.namespace, stream.name, target.stream.stream,
                    names.pod(broker.name, ordinal), failure[1])

    outcome = Outcome(ordinal, move, finished, copied, created, stats, failure)
    result = report(plan, status, outcome, gen, datetime.now(UTC))
    if result.repaired:
        DRIFT_REPAIRS.labels(stream.namespace).inc()
        logger.warning(result.repaired)
    if result.directory is not None:
        await _sync_directory(broker, runtime, {stream.name: result.directory})
    return {**result.status.to_status(body.get("status")), "retention": kept}, list(result.events)


async def _apply_retention(runtime: Runtime, broker: BrokerModel, stream: StreamModel,
                           applied: dict[str, Any], kept: dict[str, Any] | None
                           ) -> dict[str, Any] | None:
    """spec.retention, once it differs from the Create arguments, as the Stream's policy on
    every pod (retention.py; each pod applies it to the streams it holds and passes it on);
    its deletion once they agree again. Returns status.retention: changed only once every pod
    holds what was sent (else BrokerRefused, and the timer sends it again)."""
    want = retention.wanted(stream.create_arguments(), applied.get("arguments") or {},
                            broker.retention)
    if want == retention.definition_of(kept):
        return kept
    sent = retention.entry(stream.name, stream.stream, stream.partitions, want)
    missing = []
    for ordinal in range(broker.replicas):
        async with _session(runtime, broker, ordinal) as session:
            if not retention.holds(await session.sync_policies([sent]), sent):
                missing.append(names.pod(broker.name, ordinal))
    if missing:
        raise retention.NotApplied(f"policy {sent['name']} not taken by {', '.join(missing)}")
    log.info("%s/%s: retention %s on every pod", stream.namespace, stream.name,
             want if want is not None else "of its Create arguments")
    return retention.status_of(stream.name, want)


async def _sync_directory(broker: BrokerModel, runtime: Runtime,
                          changes: dict[str, Placed | None]) -> None:
    """Best effort: the Broker's timer writes the directory again on its next pass."""
    try:
        await sync_directory(runtime, broker, changes)
    except Exception as e:
        log.warning("%s/%s: stream directory not updated: %s", broker.namespace, broker.name, e)


async def _run(body: kopf.Body, memo: Any, patch: kopf.Patch, logger: Logger,
               index: Any) -> None:
    runtime = runtime_of(memo)
    meta = body["metadata"]
    pause = pause_pass(body, patch, "Stream")
    if day2.paused(meta.get("annotations")):
        return  # not created, moved nor repaired; the placement driver leaves it too
    raw = dict(body)
    async with runtime.lock("Stream", meta["namespace"], meta["name"]):
        # raw's status: what the API holds, including what the pass wrote itself (a move)
        status, events = await reconcile_stream(raw, runtime, index, logger)
    write_status(patch, raw.get("status"), status)
    if pause.event is not None:
        resumed(status, patch)
    for reason, message in events:
        # kopf.event, not kopf.info: the operator posts only warnings from its logs (timers run
        # often), but a move or a new export schedule is worth a Normal event.
        kind = "Warning" if reason in WARNINGS else "Normal"
        kopf.event(body, type=kind, reason=reason, message=message)


@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@instrumented("Stream", "change")
async def stream_changed(*, body: kopf.Body, memo: Any, patch: kopf.Patch, logger: Logger,
                         stream_placements: Any = None, **_: Any) -> None:
    await _run(body, memo, patch, logger, stream_placements)


@kopf.timer(*RESOURCE, interval=SETTINGS.stream_interval, initial_delay=SETTINGS.stream_interval,
            backoff=SETTINGS.stream_interval)
@instrumented("Stream", "timer")
async def stream_timer(*, body: kopf.Body, memo: Any, patch: kopf.Patch, logger: Logger,
                       stream_placements: Any = None, **_: Any) -> None:
    """Retries what failed, re-creates a stream missing on its broker, refreshes offsets."""
    await _run(body, memo, patch, logger, stream_placements)


@kopf.on.delete(*RESOURCE)
@instrumented("Stream", "delete")
async def stream_deleted(*, body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    """Delete the broker's stream (unless retained); the broker tells its clients."""
    runtime = runtime_of(memo)
    meta = body["metadata"]
    status = StreamStatus.from_status(body.get("status"))
    applied = status.applied or {}
    stream = StreamModel.from_body(dict(body))
    broker_name = applied.get("broker") or stream.broker
    if stream.deletion_policy == "retain" or not status.placement or not applied:
        logger.info("leaving the broker's stream in place (policy %s)", stream.deletion_policy)
    else:
        await _delete_on_broker(runtime, stream.namespace, meta["name"], applied,
                                status.placement, logger, members_of(body.get("status")))
        if (body.get("status") or {}).get("retention"):
            await _drop_policy(runtime, stream, applied["broker"])
    runtime.recent.get((stream.namespace, broker_name), {}).pop(meta["name"], None)


async def _delete_on_broker(runtime: Runtime, namespace: str, stream_name: str,
                            applied: dict[str, Any], placed: tuple[Placement, ...],
                            logger: Logger, members: tuple[int, ...] | None = None) -> None:
    broker_body = await runtime.kube.get("Broker", namespace, applied["broker"])
    if broker_body is None or broker_body["metadata"].get("deletionTimestamp"):
        logger.info("its Broker is gone: there is no broker to delete the stream on")
        return
    broker = BrokerModel.from_body(broker_body)
    await _sync_directory(broker, runtime, {stream_name: None})  # other pods stop naming it
    partitions = int(applied.get("partitions", 1))
    if partitions > 1 and int(applied.get("replicas") or 1) > 1:
        await _delete_replicated_super_stream(runtime, broker, applied["name"],
                                              [p.stream for p in placed], members)
        return
    try:
        async with _session(runtime, broker, placed[0].ordinal) as session:
            if int(applied.get("partitions", 1)) > 1:
                await session.delete_super_stream(applied["name"], [p.stream for p in placed])
            else:
                await session.delete_stream(applied["name"])
    except Exception as e:  # keep the finalizer: kopf retries until the broker answers
        reason, message = _failure(e)
        raise kopf.TemporaryError(f"{reason}: {message}", delay=SETTINGS.stream_interval) from e


async def _drop_policy(runtime: Runtime, stream: StreamModel, broker_name: str) -> None:
    """Best effort: the deleted Stream's policy deleted on every pod (a stream made again
    under its name would run with it); a pod that does not answer is logged."""
    broker_body = await runtime.kube.get("Broker", stream.namespace, broker_name)
    if broker_body is None:
        return
    broker = BrokerModel.from_body(broker_body)
    gone = retention.entry(stream.name, stream.stream, stream.partitions, None)
    for ordinal in range(broker.replicas):
        try:
            async with _session(runtime, broker, ordinal) as session:
                await session.sync_policies([gone])
        except Exception as e:
            log.warning("%s/%s: policy %s not deleted on %s: %s", stream.namespace,
                        stream.name, gone["name"], names.pod(broker.name, ordinal), e)


async def _delete_replicated_super_stream(runtime: Runtime, broker: BrokerModel, name: str,
                                          partitions: list[str],
                                          members: tuple[int, ...] | None) -> None:
    """A replicated super stream deleted on every pod holding any of it (its partitions'
    members; every pod while they are not known): DeleteSuperStream on the pod that took the
    Create deletes each partition on its members; on another pod it is unknown, and each
    partition held there is deleted (a member's Delete deletes it on the other members). A pod
    that does not answer keeps the finalizer: kopf retries until every one has."""
    failed: list[str] = []
    for ordinal in members if members is not None else range(broker.replicas):
        try:
            async with _session(runtime, broker, ordinal) as session:
                await session.delete_super_stream(name, partitions)
        except Exception as e:
            reason, message = _failure(e)
            failed.append(f"{names.pod(broker.name, ordinal)}: {reason}: {message}")
    if failed:
        raise kopf.TemporaryError("; ".join(failed), delay=SETTINGS.stream_interval)
