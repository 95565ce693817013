"""Carries out storage.py's plan for one Broker: reads the StatefulSet, its PVCs and their
StorageClass, patches the PVCs, replaces the StatefulSet (orphaning its pods), and sets the
StorageResized condition with an Event when it changes. The Broker reconciler calls it before
applying its manifests, so a StatefulSet deleted here is made again, with the new size, in the
same pass."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from . import names, storage
from .conditions import get_condition, set_condition
from .constants import GROUP, VERSION
from .kube import ApiError
from .model import BrokerModel
from .runtime import Runtime

log = logging.getLogger(__name__)

#: How long the orphaning delete of the StatefulSet is waited for (the garbage collector
#: removes its finalizer once the pods are orphaned); longer: the next pass makes it again.
ORPHAN_WAIT_S = 10.0
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
VOLUME = "data"  # the volumeClaimTemplate's name (builders/statefulset.py)


def template_size(sts: dict[str, Any]) -> str | None:
    for vct in (sts.get("spec") or {}).get("volumeClaimTemplates") or []:
        if (vct.get("metadata") or {}).get("name") == VOLUME:
            size = (((vct.get("spec") or {}).get("resources") or {}).get("requests")
                    or {}).get("storage")
            return None if size is None else str(size)
    return None


def volume(pvc: dict[str, Any]) -> storage.Volume:
    spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
    requested = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    capacity = (status.get("capacity") or {}).get("storage")
    pending = any(c.get("type") == storage.FILE_SYSTEM_RESIZE_PENDING
                  and c.get("status") == "True" for c in status.get("conditions") or [])
    return storage.Volume(pvc["metadata"]["name"], None if requested is None else str(requested),
                          None if capacity is None else str(capacity), pending)


async def _expandable(runtime: Runtime, name: str | None) -> tuple[bool | None, str | None]:
    """Whether the class (None: the cluster's default) allows expansion; None: not found."""
    if name:
        cls = await runtime.kube.get("StorageClass", "", name)
        return (None if cls is None else cls.get("allowVolumeExpansion") is True), name
    for cls in await runtime.kube.list("StorageClass", ""):
        annotations = cls["metadata"].get("annotations") or {}
        if annotations.get(DEFAULT_CLASS) == "true":
            return cls.get("allowVolumeExpansion") is True, cls["metadata"]["name"]
    return None, None


async def reconcile_storage(runtime: Runtime, broker: BrokerModel, body: dict[str, Any],
                            conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The storage step of a Broker pass; returns the conditions with StorageResized set."""
    sts = await runtime.kube.get("StatefulSet", broker.namespace, broker.name)
    if sts is None or sts["metadata"].get("deletionTimestamp"):
        return conditions
    template = template_size(sts)
    replicas = int((sts.get("spec") or {}).get("replicas") or 0)
    pvcs = [p for p in [await runtime.kube.get(
        "PersistentVolumeClaim", broker.namespace, f"{VOLUME}-{names.pod(broker.name, o)}")
        for o in range(replicas)] if p is not None]
    volumes = [volume(p) for p in pvcs]
    wanted = storage.parse_quantity(broker.storage_size)
    expandable, cls = None, broker.storage_class
    if template is not None and (wanted > storage.parse_quantity(template) or any(
            v.requested is None or storage.parse_quantity(v.requested) < wanted
            for v in volumes)):
        cls = broker.storage_class or next(
            (p["spec"].get("storageClassName") for p in pvcs
             if (p.get("spec") or {}).get("storageClassName")), None)
        expandable, cls = await _expandable(runtime, cls)
    plan = storage.decide(broker.storage_size, template, expandable, volumes, cls)
    for name in plan.patch:
        log.info("%s/%s: PVC %s to %s", broker.namespace, broker.name, name,
                 broker.storage_size)
        await runtime.kube.patch("PersistentVolumeClaim", broker.namespace, name, {
            "spec": {"resources": {"requests": {"storage": broker.storage_size}}}})
    if plan.replace_statefulset:
        # volumeClaimTemplates cannot change: the object goes (its pods stay, orphaned, and
        # the StatefulSet made again adopts them) and the manifests applied next make it
        # again with the new size.
        log.info("%s/%s: replacing the StatefulSet (pods orphaned) for %s volumes",
                 broker.namespace, broker.name, broker.storage_size)
        await runtime.kube.delete("StatefulSet", broker.namespace, broker.name,
                                  propagation="Orphan")
        await _gone(runtime, broker)
    had = get_condition(conditions, storage.STORAGE_RESIZED)
    if plan.status is None or (had is None and plan.status):
        return conditions
    result = set_condition(conditions, storage.STORAGE_RESIZED, plan.status, plan.reason,
                           plan.message, broker.generation)
    if had is None or (had.get("status") == "True", had.get("reason")) != (
            plan.status, plan.reason):  # an Event per change, not per pass
        await _event(runtime, body, "Warning" if plan.warning else "Normal", plan.reason,
                     plan.message)
    return result


async def _gone(runtime: Runtime, broker: BrokerModel) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ORPHAN_WAIT_S
    while await runtime.kube.get("StatefulSet", broker.namespace, broker.name) is not None:
        if loop.time() > deadline:
            log.info("%s/%s: the StatefulSet is still being deleted: made again next pass",
                     broker.namespace, broker.name)
            return
        await asyncio.sleep(0.2)


async def _event(runtime: Runtime, body: dict[str, Any], kind: str, reason: str,
                 message: str) -> None:
    meta = body["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        await runtime.kube.create({
            "apiVersion": "v1", "kind": "Event", "type": kind, "reason": reason,
            "message": message,
            # Named after the reason and generation: two passes seeing the change at once (the
            # change handler and the timer, each from a body without the new condition) post
            # one Event, the second create refused as a duplicate.
            "metadata": {"namespace": meta.get("namespace"),
                         "name": f"{meta['name']}.{reason.lower()}.{meta.get('generation', 0)}"},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Broker",
                               "name": meta["name"], "namespace": meta.get("namespace"),
                               "uid": meta.get("uid", "")},
            "source": {"component": "streamlet-operator"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        })
    except ApiError as e:
        if e.status == 409:  # posted by a pass that saw the same change
            return
        log.warning("%s/%s: event %s not posted: %s", meta.get("namespace"), meta["name"],
                    reason, e)
