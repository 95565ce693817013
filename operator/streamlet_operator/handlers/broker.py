"""Broker reconciler: apply the builders' manifests, refuse stranding scale-downs, report."""

from __future__ import annotations

import base64
import logging
from dataclasses import replace
from typing import Any, cast

import kopf

from .. import day2, drain, names, rolling
from ..builders import build_all
from ..builders.export import BROKER_LABEL, EXPORT_USER_COMPONENT, export_permission
from ..builders.secret import plan_access, unknown_users
from ..builders.statefulset import IMMUTABLE_SPEC_FIELDS, with_restart
from ..conditions import adopt, get_condition, raised, set_condition
from ..constants import GROUP, VERSION
from ..directory import sync_directory
from ..failover import members_of
from ..metrics import instrumented
from ..model import MOVE_STREAMS, BrokerModel, Permission, StreamModel
from ..placement import blocked_scale_down, effective_replicas, members_held
from ..resize import reconcile_storage
from ..runtime import Runtime
from ..settings import SETTINGS
from .common import Logger, pause_pass, placements, resumed, runtime_of, write_status

RESOURCE = (GROUP, VERSION, "brokers")
log = logging.getLogger(__name__)


async def _users(runtime: Runtime, broker: BrokerModel) -> tuple[dict[str, str], str | None]:
    """The broker's users (the operator's own first) and a problem with the users Secret."""
    user, password = await runtime.broker_credentials(broker.namespace, broker.name)
    users = {user: password}
    if not broker.users_secret:
        return users, None
    secret = await runtime.kube.get("Secret", broker.namespace, broker.users_secret)
    if secret is None:
        return users, f"Secret {broker.users_secret!r} not found"
    for name, value in (secret.get("data") or {}).items():
        if name != user:
            users[name] = base64.b64decode(value).decode()
    return users, None


async def _export_users(runtime: Runtime, broker: BrokerModel
                        ) -> tuple[dict[str, str], list[Permission]]:
    """The export users of the Broker's Streams (exports.py makes their Secrets) and the
    read-only permission of each. A Secret whose Stream is gone, has no export or names
    another Broker now is deleted (its owner reference does it too, on a real cluster)."""
    users: dict[str, str] = {}
    permissions: list[Permission] = []
    found = await runtime.kube.list("Secret", broker.namespace, labels={
        "app.kubernetes.io/component": EXPORT_USER_COMPONENT, BROKER_LABEL: broker.name})
    for secret in found:
        stream_name = (secret["metadata"].get("labels") or {}).get("streamlet.dev/stream", "")
        body = await runtime.kube.get("Stream", broker.namespace, stream_name) if stream_name else None
        stream = StreamModel.from_body(body) if body else None
        data = secret.get("data") or {}
        if (stream is None or not (body or {}).get("spec", {}).get("export")
                or stream.broker != broker.name or "user" not in data or "password" not in data
                or (body or {}).get("metadata", {}).get("deletionTimestamp")):
            await runtime.kube.delete("Secret", broker.namespace, secret["metadata"]["name"])
            continue
        permission = export_permission(stream)
        users[permission.user] = base64.b64decode(data["password"]).decode()
        permissions.append(permission)
    return users, permissions


async def _replicated_members(runtime: Runtime, broker: BrokerModel,
                              copies: dict[str, int] | None = None) -> dict[str, list[int]]:
    """Each replicated Stream of the Broker (by resource name; replicas above 1, or a record
    of its members, as a stream shrunk to one keeps): the pods its members are on
    (status.replication), every pod the StatefulSet has while they are not known yet;
    ``copies`` gets each one's replicas."""
    sts = await runtime.kube.get("StatefulSet", broker.namespace, broker.name) or {}
    pods = int((sts.get("spec") or {}).get("replicas") or broker.replicas)
    streams: list[tuple[str, list[int] | None]] = []
    for obj in await runtime.kube.list("Stream", broker.namespace):
        status = obj.get("status") or {}
        applied = status.get("applied") or {}
        if applied.get("broker") != broker.name:
            continue
        held = members_of(status)  # a super stream: every partition's
        if int(applied.get("replicas") or 1) == 1 and held is None:
            continue  # one copy: the Stream reconciler's (placements)
        if copies is not None:
            copies[obj["metadata"]["name"]] = int(applied.get("replicas") or 1)
        streams.append((obj["metadata"]["name"], list(held) if held is not None else None))
    return members_held(streams, pods)


def _restart(body: dict[str, Any], status: dict[str, Any]) -> str | None:
    """The restart value the pod template carries: a new streamlet.dev/restart value is
    recorded in ``status`` (so it rolls the pods once) with an Event; else the one handled."""
    handled = status.get(day2.RESTARTED_FIELD)
    wanted = day2.restart_wanted((body.get("metadata") or {}).get("annotations"), handled)
    if wanted is None:
        return str(handled) if handled else None
    status[day2.RESTARTED_FIELD] = wanted
    meta = body["metadata"]
    log.info("%s/%s: restart %r asked for: rolling the pods", meta.get("namespace"),
             meta.get("name"), wanted)
    kopf.event(cast(kopf.Body, body), type="Normal", reason=day2.RESTART_REQUESTED,
               message=f"{day2.RESTART}={wanted}: rolling the pods, one at a time")
    return wanted


#: The Broker condition (and Event) of a scale-down held while pods to be removed hold streams.
SCALE_DOWN_BLOCKED = "ScaleDownBlocked"
#: The Broker conditions driver.py owns.
DRIVER_CONDITIONS = frozenset({drain.DRAINED, rolling.ROLLING})


async def reconcile_broker(body: dict[str, Any], runtime: Runtime, index: Any,
                           logger: Logger) -> dict[str, Any]:
    """Make the cluster match one Broker; return its new status."""
    broker = BrokerModel.from_body(body)
    status: dict[str, Any] = dict(body.get("status") or {})
    conditions = status.get("conditions") or []
    gen = broker.generation

    held = placements(index, runtime, broker.namespace, broker.name)
    blocked = blocked_scale_down(held, broker.replicas)
    copies: dict[str, int] = {}
    members = await _replicated_members(runtime, broker, copies)
    kept = blocked_scale_down(members, broker.replicas)
    # The placement driver moves members off removed pods when the pods staying can take
    # every member of the stream (driver.py); the others hold the scale-down.
    stuck = {n: o for n, o in kept.items() if copies.get(n, broker.replicas + 1) > broker.replicas}
    replicas = max(effective_replicas(broker.replicas, held),
                   effective_replicas(broker.replicas, members))
    if kept:
        # Before MoveStreams: a replicated stream's members move one at a time, never copied.
        streams = ", ".join(f"{n} (pod {', '.join(str(o) for o in sorted(set(o)))})"
                            for n, o in sorted((stuck or kept).items()))
        if stuck:
            message = (f"keeping {replicas} pods instead of {broker.replicas}: replicated"
                       f" streams have members on pods to be removed: {streams}; no pod can"
                       " take them (each member on a pod of its own): lower the streams'"
                       " replicas or delete them first")
        else:
            message = (f"keeping {replicas} pods instead of {broker.replicas} while the"
                       " members of replicated streams move off the pods to be removed:"
                       f" {streams}")
        conditions = set_condition(conditions, "ScaleDownBlocked", True,
                                   "ReplicatedMembers" if stuck else "MovingMembers",
                                   message, gen)
        log.warning("%s/%s: %s", broker.namespace, broker.name, message)
    elif blocked:
        streams = ", ".join(f"{n} (pod {', '.join(str(o) for o in sorted(set(o)))})"
                            for n, o in sorted(blocked.items()))
        moving = broker.scale_down_policy == MOVE_STREAMS
        message = (f"keeping {replicas} pods instead of {broker.replicas}: pods to be removed hold"
                   f" streams {streams}; " + ("moving them to the remaining pods" if moving else
                                              "delete those streams, or set scaleDownPolicy:"
                                              " MoveStreams"))
        conditions = set_condition(conditions, "ScaleDownBlocked", True,
                                   "MovingStreams" if moving else "PodsHoldStreams", message, gen)
        log.warning("%s/%s: %s", broker.namespace, broker.name, message)
    else:
        conditions = set_condition(conditions, "ScaleDownBlocked", False, "NoStreamsStranded",
                                   "", gen)
    blocking = get_condition(conditions, SCALE_DOWN_BLOCKED)
    if raised(get_condition(status.get("conditions"), SCALE_DOWN_BLOCKED), blocking):
        assert blocking is not None  # one Event as it starts or its cause changes, not per pass
        kopf.event(cast(kopf.Body, body), reason=SCALE_DOWN_BLOCKED, message=blocking["message"],
                   type="Normal" if blocking["reason"].startswith("Moving") else "Warning")

    users, users_problem = await _users(runtime, broker)
    conditions = set_condition(
        conditions, "UsersConfigured", users_problem is None,
        "UsersSecretNotFound" if users_problem else "UsersApplied", users_problem or "", gen)
    exporters, export_permissions = await _export_users(runtime, broker)
    users.update(exporters)
    # After the spec's: for the same user and vhost plan_access keeps the last entry, so an
    # export user stays read-only whatever spec.permissions says of it.
    broker = replace(broker, permissions=(*broker.permissions, *export_permissions))
    conditions = _access_condition(conditions, broker, users, gen)

    # Before the apply: a StatefulSet replaced for larger volumes is made again by it.
    conditions = await reconcile_storage(runtime, broker, body, conditions)
    # Before the StatefulSet: its pods mount the directory (optional, but better there at start).
    await sync_directory(runtime, broker)
    restart = _restart(body, status)
    for manifest in build_all(broker, replicas, users, SETTINGS.namespace):
        immutable = IMMUTABLE_SPEC_FIELDS if manifest["kind"] == "StatefulSet" else ()
        if manifest["kind"] == "StatefulSet":
            manifest = with_restart(manifest, restart)
        await runtime.kube.apply(manifest, immutable=immutable)
    if not broker.network_policy.enabled:  # turned off: the one it made goes (no other)
        made = await runtime.kube.get("NetworkPolicy", broker.namespace, broker.name)
        owners = ((made or {}).get("metadata") or {}).get("ownerReferences") or []
        if any(o.get("uid") == broker.uid for o in owners):
            await runtime.kube.delete("NetworkPolicy", broker.namespace, broker.name)

    sts = await runtime.kube.get("StatefulSet", broker.namespace, broker.name) or {}
    ready = int((sts.get("status") or {}).get("readyReplicas") or 0)
    is_ready = ready >= replicas
    conditions = set_condition(
        conditions, "Ready", is_ready, "AllPodsReady" if is_ready else "PodsNotReady",
        f"{ready}/{replicas} pods ready", gen)

    per_pod: dict[str, int] = {names.pod(broker.name, i): 0 for i in range(replicas)}
    for ordinals in held.values():
        for o in ordinals:
            per_pod[names.pod(broker.name, o)] = per_pod.get(names.pod(broker.name, o), 0) + 1
    port = broker.advertise.port or broker.client_port
    status.update({
        "observedGeneration": gen,
        "phase": "Ready" if is_ready and not (blocked or kept) else (
            "ScaleDownBlocked" if blocked or kept else "Progressing"),
        "replicas": replicas,
        "readyReplicas": ready,
        "clientService": (f"{names.client_service(broker.name)}.{broker.namespace}.svc:"
                          f"{broker.client_port}"),
        "endpoints": [f"{names.pod_dns(broker.name, i, broker.namespace)}:{port}"
                      for i in range(replicas)],
        "streams": per_pod,
        "conditions": conditions,
    })
    return status


def _access_condition(conditions: list[dict[str, Any]], broker: BrokerModel,
                      users: dict[str, str], gen: int) -> list[dict[str, Any]]:
    """AccessConfigured: False with what the config does instead when spec.vhosts and
    spec.permissions could not be applied as written (secret.plan_access says what)."""
    problems = list(plan_access(broker).problems)
    unknown = unknown_users(broker, users)
    if unknown:
        problems.append(f"permissions name users that neither the operator nor "
                        f"spec.usersSecret define: {', '.join(unknown)} (they exist without a "
                        "password: only a client certificate naming them logs them in)")
    reason = ("AccessApplied" if not problems else
              "InvalidPermissions" if plan_access(broker).problems else "UnknownUsers")
    if problems:
        log.warning("%s/%s: %s", broker.namespace, broker.name, "; ".join(problems))
    return set_condition(conditions, "AccessConfigured", not problems, reason,
                         "; ".join(problems), gen)


async def _run(body: kopf.Body, memo: Any, patch: kopf.Patch, logger: Logger,
               stream_placements: Any) -> None:
    runtime = runtime_of(memo)
    meta = body["metadata"]
    pause = pause_pass(body, patch, "Broker")
    if day2.paused(meta.get("annotations")):
        return  # no child applied; the placement driver does nothing either (driver.tick)
    async with runtime.lock("Broker", meta["namespace"], meta["name"]):
        raw = dict(body)
        status = await reconcile_broker(raw, runtime, stream_placements, logger)
        # The placement driver writes these from its own fresh reads; kopf's body may be
        # older, and writing its copies back would undo the driver's last change.
        fresh = await runtime.kube.get("Broker", meta["namespace"], meta["name"])
        if fresh is not None:
            status["conditions"] = adopt(status["conditions"],
                                         (fresh.get("status") or {}).get("conditions"),
                                         DRIVER_CONDITIONS)
    write_status(patch, body.get("status"), status)
    if pause.event is not None:
        resumed(status, patch)


@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@instrumented("Broker", "change")
async def broker_changed(*, body: kopf.Body, memo: Any, patch: kopf.Patch, logger: Logger,
                         stream_placements: Any = None, **_: Any) -> None:
    await _run(body, memo, patch, logger, stream_placements)


@kopf.timer(*RESOURCE, interval=SETTINGS.broker_interval, initial_delay=SETTINGS.broker_interval,
            backoff=SETTINGS.broker_interval)
@instrumented("Broker", "timer")
async def broker_timer(*, body: kopf.Body, memo: Any, patch: kopf.Patch, logger: Logger,
                       stream_placements: Any = None, **_: Any) -> None:
    """Repairs drifted children, applies a scale-down once unblocked, refreshes readiness."""
    await _run(body, memo, patch, logger, stream_placements)
