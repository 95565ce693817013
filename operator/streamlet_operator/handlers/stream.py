"""Stream reconciler: place the stream on a broker pod, create it there, report, repair, delete."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import kopf

from .. import names
from ..brokers import BrokerSession, BrokerUnavailable, StreamStats
from ..builders.directory import Placed
from ..conditions import set_condition
from ..constants import GROUP, VERSION
from ..directory import sync_directory
from ..exports import FAILED, INVALID, reconcile_export
from ..metrics import DRIFT_REPAIRS, MOVES, instrumented
from ..model import BrokerModel, StreamModel
from ..moves import copy_stream, sealed
from ..placement import place, stream_counts
from ..runtime import Runtime
from ..settings import SETTINGS
from .common import placements, runtime_of, write_status

RESOURCE = (GROUP, VERSION, "streams")
WARNINGS = frozenset({"StreamRecreated", INVALID, FAILED})
Logger = logging.Logger | logging.LoggerAdapter[Any]
log = logging.getLogger(__name__)
#: After this long waiting for the old pod to seal, the condition says the move is stalled.
MOVE_STALLED_S = 300


@kopf.index(*RESOURCE)
def stream_placements(*, namespace: str | None, name: str, spec: kopf.Spec,
                      status: kopf.Status, **_: Any) -> dict[tuple[str, str], dict[str, list[int]]]:
    """(namespace, broker) -> {stream resource: pod ordinal of each broker stream}."""
    applied = status.get("applied") or {}
    broker = applied.get("broker") or spec.get("broker", "")
    ordinals = [int(p["ordinal"]) for p in status.get("placement") or []]
    move = status.get("move")
    if move:  # the old pod still holds the stream until the move finishes: keep it running
        ordinals.append(int(move["from"]))
    return {(namespace or "", broker): {name: ordinals}}


@contextlib.asynccontextmanager
async def _session(runtime: Runtime, broker: BrokerModel,
                   ordinal: int) -> AsyncIterator[BrokerSession]:
    address = runtime.resolve(broker.namespace, broker.name, ordinal, broker.port)
    user, password = await runtime.broker_credentials(broker.namespace, broker.name)
    async with runtime.admin.session(address, user, password) as session:
        yield session


def _failure(exc: BaseException) -> tuple[str, str]:
    """A condition reason and message for a failed broker call."""
    lost = type(exc).__name__ == "ConnectionClosed"  # streamlet.client: the pod went away
    if lost or isinstance(exc, BrokerUnavailable | OSError | TimeoutError):
        return "BrokerUnavailable", str(exc) or type(exc).__name__
    code = getattr(exc, "code", None)
    return "BrokerRefused", f"{getattr(code, 'name', code)}: {exc}"


IMMUTABLE_FIELDS = {"name": "spec.name", "broker": "spec.broker", "partitions": "spec.partitions",
                    "arguments": "spec.retention/spec.filterSizeBytes"}


def _immutable_changes(applied: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    return [f"{field} (was {applied.get(key)!r}, now {wanted.get(key)!r})"
            for key, field in IMMUTABLE_FIELDS.items() if applied.get(key) != wanted.get(key)]


async def _choose_pod(runtime: Runtime, index: Any, stream: StreamModel,
                      broker: BrokerModel) -> int:
    async with runtime.placement_lock:
        held = placements(index, runtime, stream.namespace, broker.name)
        held.pop(stream.name, None)
        ordinal = place(stream_counts(held.values(), broker.replicas), stream.partitions)
        # A super stream's partitions live with it on one pod: each counts as a stream.
        runtime.recent[(stream.namespace, broker.name)][stream.name] = [ordinal] * stream.partitions
        return ordinal


async def _start_move(runtime: Runtime, index: Any, stream: StreamModel,
                      arguments: dict[str, str], broker: BrokerModel, source: int,
                      conditions: list[dict[str, Any]], gen: int) -> dict[str, Any]:
    """Start moving the stream off pod ``source`` (being removed); return the status fields
    written (``move`` among them).

    Copy, then record the new placement and the move in progress (``status.move``), then name
    the new pod in the directory: the old pod seals its stream when it reads that, and
    ``_finish_move`` (this pass or a later one) copies the rest and deletes the old stream.
    """
    async with runtime.placement_lock:
        held = placements(index, runtime, stream.namespace, broker.name)
        held.pop(stream.name, None)
        target = place(stream_counts(held.values(), broker.replicas), stream.partitions)
    partitions = stream.partition_names
    async with _session(runtime, broker, source) as old, _session(runtime, broker, target) as new:
        if not await _create(new, stream, arguments):
            # Left by a move that failed half-way (the status still points at the old pod).
            await _delete(new, stream)
            await _create(new, stream, arguments)
        for partition in partitions:  # the bulk, while producers go on: the rest comes later
            await copy_stream(old, new, partition, follow=False)
    move = {"from": source, "to": target,
            "started": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    # Recorded before the directory names the new pod: a restarted operator resumes the move,
    # and no repair ever re-creates the old stream. Not Ready from this write on: the old pod
    # takes publishes until it seals (the Ready=True of before would outlive this pass).
    reason, message = _move_pending(move, broker)
    written = {
        "phase": "Moving",
        "placement": [{"stream": p, "pod": names.pod(broker.name, target), "ordinal": target}
                      for p in partitions],
        "leader": names.pod(broker.name, target), "move": move,
        "conditions": set_condition(conditions, "Ready", False, reason, message, gen)}
    await runtime.kube.patch("Stream", stream.namespace, stream.name, {"status": written},
                             subresource="status")
    runtime.recent[(stream.namespace, broker.name)][stream.name] = [target] * len(partitions) + [
        source]
    return written


async def _finish_move(runtime: Runtime, stream: StreamModel, broker: BrokerModel,
                       move: dict[str, Any]) -> int | None:
    """Finish a move once the old pod has sealed its stream; return the messages copied since
    it started, or None if the old pod has not sealed yet (a later pass tries again)."""
    source, target = int(move["from"]), int(move["to"])
    partitions = stream.partition_names
    # (Again) name the new pod: the old pod seals when it reads this.
    await sync_directory(runtime, broker, {stream.name: Placed(
        stream.stream, stream.partitions, tuple((p, target) for p in partitions))})
    async with _session(runtime, broker, source) as old, _session(runtime, broker, target) as new:
        if not await sealed(old, partitions):
            return None
        copied = 0  # the tail: what the old pod confirmed after the first copy, now final
        for partition in partitions:
            if await old.stream_exists(partition):
                copied += await copy_stream(old, new, partition)
        await _delete(old, stream)
    runtime.recent[(stream.namespace, broker.name)][stream.name] = [target] * len(partitions)
    MOVES.labels(stream.namespace).inc()
    return copied


def _move_pending(move: dict[str, Any], broker: BrokerModel) -> tuple[str, str]:
    """The Ready condition's reason and message while the old pod has not sealed."""
    old, new = names.pod(broker.name, int(move["from"])), names.pod(broker.name, int(move["to"]))
    started = datetime.strptime(move["started"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    waited = int((datetime.now(UTC) - started).total_seconds())
    if waited < MOVE_STALLED_S:
        return "MovePending", (f"moving to {new}: waiting for {old} to read the stream directory"
                               f" naming {new} and stop taking publishes ({waited} s)")
    return "MoveStalled", (f"moving to {new}: {old} has not sealed the stream after {waited} s;"
                           f" check that it mounts the directory ConfigMap"
                           f" {names.directory_configmap(broker.name)} and advertises the"
                           " address the directory names for it")


async def _create(session: BrokerSession, stream: StreamModel, arguments: dict[str, str]) -> bool:
    if stream.partitions > 1:
        return await session.create_super_stream(stream.stream, stream.partition_names, arguments)
    return await session.create_stream(stream.stream, arguments)


async def _delete(session: BrokerSession, stream: StreamModel) -> bool:
    if stream.partitions > 1:
        return await session.delete_super_stream(stream.stream, stream.partition_names)
    return await session.delete_stream(stream.stream)


async def reconcile_stream(body: dict[str, Any], runtime: Runtime, index: Any,
                           logger: Logger) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Place and create one Stream (again, if it went missing), then its scheduled export.

    Returns its new status, and Events to post: (reason, message), warnings first.
    """
    status, events = await _reconcile_on_broker(body, runtime, index, logger)
    # The export is a schedule on Kubernetes, independent of the broker's state right now.
    gen = int(body["metadata"].get("generation") or 0)
    events += await reconcile_export(body, runtime.kube, status, gen)
    return status, events


async def _reconcile_on_broker(body: dict[str, Any], runtime: Runtime, index: Any,
                               logger: Logger) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    stream = StreamModel.from_body(body)
    status: dict[str, Any] = dict(body.get("status") or {})
    conditions = status.get("conditions") or []
    gen = int(body["metadata"].get("generation") or 0)
    status["observedGeneration"] = gen

    # Settings fixed at creation win over a changed spec; the change is refused, visibly.
    applied: dict[str, Any] | None = status.get("applied")
    target = applied or stream.immutable()
    refused = _immutable_changes(applied, stream.immutable()) if applied else []
    if refused:
        target_stream = StreamModel(
            name=stream.name, namespace=stream.namespace, stream=target["name"],
            broker=target["broker"], partitions=int(target["partitions"]),
            deletion_policy=stream.deletion_policy)
        arguments = dict(target["arguments"])
    else:
        target_stream, arguments = stream, stream.create_arguments()

    broker_body = await runtime.kube.get("Broker", stream.namespace, target_stream.broker)
    if broker_body is None:
        status["phase"] = "Pending"
        status["conditions"] = set_condition(
            conditions, "Ready", False, "BrokerNotFound",
            f"Broker {target_stream.broker!r} does not exist in namespace {stream.namespace}", gen)
        return status, []
    broker = BrokerModel.from_body(broker_body)

    placed = status.get("placement") or []
    if placed and not applied and int(placed[0]["ordinal"]) >= broker.replicas:
        placed = []  # placed on a pod being removed, never created there: place it anew
    ordinal = int(placed[0]["ordinal"]) if placed else await _choose_pod(
        runtime, index, target_stream, broker)
    pod = names.pod(broker.name, ordinal)
    partitions = target_stream.partition_names
    events: list[tuple[str, str]] = []
    move: dict[str, Any] | None = status.get("move")
    try:
        if (placed and applied and not move and ordinal >= broker.replicas
                and broker.scale_down_policy == "MoveStreams"):
            written = await _start_move(runtime, index, target_stream, arguments, broker,
                                        ordinal, conditions, gen)
            # The pass's status is written as a change from this: a field set back to what it
            # was before the move (phase Ready, no move) must be written too.
            body["status"] = {**(body.get("status") or {}), **written}
            status.update(written)
            move, conditions = written["move"], written["conditions"]
            ordinal = int(move["to"])
            pod = names.pod(broker.name, ordinal)
        if move:
            copied = await _finish_move(runtime, target_stream, broker, move)
            if copied is not None:
                old = names.pod(broker.name, int(move["from"]))
                events.append(("StreamMoved", f"{target_stream.stream} moved from {old} to "
                               f"{pod} ({copied} messages copied after the switch)"))
                status["move"] = move = None
        async with _session(runtime, broker, ordinal) as session:
            created = await _create(session, target_stream, arguments)
            stats: StreamStats = await session.stream_stats(partitions[0])
    except Exception as e:  # the broker's answer becomes the condition; the timer retries
        reason, message = _failure(e)
        log.warning(f"{stream.namespace}/{stream.name}: {target_stream.stream!r} on {pod}: {message}")
        status["phase"] = "Pending" if not applied else "Degraded"
        status["leader"] = pod
        status["conditions"] = set_condition(conditions, "Ready", False, reason,
                                             f"{pod}: {message}", gen)
        if not applied:
            status["placement"] = [{"stream": p, "pod": pod, "ordinal": ordinal}
                                   for p in partitions]
        return status, events

    if move:  # usable on the new pod already; the old one still has to seal
        reason, message = _move_pending(move, broker)
        status.update({"phase": "Moving", "leader": pod, "placement": [
            {"stream": p, "pod": pod, "ordinal": ordinal} for p in partitions]})
        status["conditions"] = set_condition(conditions, "Ready", False, reason, message, gen)
        return status, events
    if created and applied and not events:
        DRIFT_REPAIRS.labels(stream.namespace).inc()
        repaired = f"{target_stream.stream} was missing on {pod}; re-created it (empty)"
        logger.warning(repaired)
        events.insert(0, ("StreamRecreated", repaired))
    status.update({
        "phase": "Ready",
        "leader": pod,
        "partitions": target_stream.partitions,
        "placement": [{"stream": p, "pod": pod, "ordinal": ordinal} for p in partitions],
        "applied": target,
        "firstOffset": stats.first_offset,
        "committedOffset": stats.committed_offset,
        "lastOffset": stats.last_offset,
        "size": stats.size,
    })
    new_place = Placed.from_status(status)
    if new_place != Placed.from_status(body.get("status") or {}):
        await _sync_directory(broker, runtime, {stream.name: new_place})
    if refused:
        status["conditions"] = set_condition(
            conditions, "Ready", False, "ImmutableFieldChanged",
            "refused: " + "; ".join(refused) + ". The stream keeps its original settings;"
            " delete and re-create the Stream to change them.", gen)
    else:
        status["conditions"] = set_condition(
            conditions, "Ready", True, "StreamReady", f"{target_stream.stream} on {pod}", gen)
    return status, events


async def _sync_directory(broker: BrokerModel, runtime: Runtime,
                          changes: dict[str, Placed | None]) -> None:
    """Best effort: the Broker's timer writes the directory again on its next pass."""
    try:
        await sync_directory(runtime, broker, changes)
    except Exception as e:
        log.warning(f"{broker.namespace}/{broker.name}: stream directory not updated: {e}")


async def _run(body: kopf.Body, memo: Any, patch: kopf.Patch, logger: Logger,
               index: Any) -> None:
    runtime = runtime_of(memo)
    meta = body["metadata"]
    raw = dict(body)
    async with runtime.lock("Stream", meta["namespace"], meta["name"]):
        # raw's status: what the API holds, including what the pass wrote itself (a move)
        status, events = await reconcile_stream(raw, runtime, index, logger)
    write_status(patch, raw.get("status"), status)
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
    status = body.get("status") or {}
    applied = status.get("applied") or {}
    placed = status.get("placement") or []
    stream = StreamModel.from_body(dict(body))
    broker_name = applied.get("broker") or stream.broker
    if stream.deletion_policy == "retain" or not placed or not applied:
        logger.info(f"leaving the broker's stream in place (policy {stream.deletion_policy})")
    else:
        await _delete_on_broker(runtime, stream.namespace, meta["name"], applied, placed, logger)
    runtime.recent.get((stream.namespace, broker_name), {}).pop(meta["name"], None)


async def _delete_on_broker(runtime: Runtime, namespace: str, stream_name: str,
                            applied: dict[str, Any],
                            placed: list[dict[str, Any]], logger: Logger) -> None:
    broker_body = await runtime.kube.get("Broker", namespace, applied["broker"])
    if broker_body is None or broker_body["metadata"].get("deletionTimestamp"):
        logger.info("its Broker is gone: there is no broker to delete the stream on")
        return
    broker = BrokerModel.from_body(broker_body)
    await _sync_directory(broker, runtime, {stream_name: None})  # other pods stop naming it
    try:
        async with _session(runtime, broker, int(placed[0]["ordinal"])) as session:
            if int(applied.get("partitions", 1)) > 1:
                await session.delete_super_stream(applied["name"], [p["stream"] for p in placed])
            else:
                await session.delete_stream(applied["name"])
    except Exception as e:  # keep the finalizer: kopf retries until the broker answers
        reason, message = _failure(e)
        raise kopf.TemporaryError(f"{reason}: {message}", delay=SETTINGS.stream_interval) from e
