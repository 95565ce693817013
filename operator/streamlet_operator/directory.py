"""Keeping a Broker's stream directory ConfigMap in step with where its Streams are placed.

The placements come from the Streams' status (listed from the API server), overlaid with the
decisions this process made and has not seen in a listing yet (a status kopf has still to
write, a deletion still in progress). One sync at a time per Broker, so two reconcilers never
write the ConfigMap from different views at once; with a Lease, a deposed leader's write is
fenced (lease.fenced_apply).
"""

from __future__ import annotations

from typing import Any

from . import names
from .builders.directory import Placed, advertised_host, build_directory_configmap, render_directory
from .lease import fenced_apply
from .model import BrokerModel
from .runtime import Runtime


async def pod_address(runtime: Runtime, broker: BrokerModel, ordinal: int) -> str | None:
    """``host:port`` that pod ``ordinal`` advertises to clients; None while it is unknown."""
    if runtime.advertised is not None:
        return await runtime.advertised(broker, ordinal)
    port = broker.advertise.port or broker.client_port  # TLS only: the TLS port
    host = advertised_host(broker, ordinal)
    if host is None:  # PodIP: the pod's status has it once the pod runs
        pod = await runtime.kube.get("Pod", broker.namespace, names.pod(broker.name, ordinal))
        host = ((pod or {}).get("status") or {}).get("podIP")
        if not host:
            return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _belongs(obj: dict[str, Any], broker: str) -> bool:
    status = obj.get("status") or {}
    applied = status.get("applied") or {}
    return bool((applied.get("broker") or (obj.get("spec") or {}).get("broker")) == broker)


async def sync_directory(runtime: Runtime, broker: BrokerModel,
                         changes: dict[str, Placed | None] | None = None) -> None:
    """Write the Broker's directory ConfigMap; ``changes``: Stream resource name -> its new
    placement, or None once deleted on the broker (remembered until listings agree)."""
    key = (broker.namespace, broker.name)
    async with runtime.lock("Directory", *key):
        recent = runtime.directory_recent[key]
        recent.update(changes or {})
        placed: dict[str, Placed | None] = {}
        for obj in await runtime.kube.list("Stream", broker.namespace):
            if _belongs(obj, broker.name):
                placed[obj["metadata"]["name"]] = Placed.from_status(obj.get("status") or {})
        for name in [n for n, p in recent.items() if p is None and n not in placed]:
            del recent[name]  # the deletion is visible now: nothing to overlay
        placed.update(recent)
        ordinals = sorted({o for p in placed.values() if p for o in p.ordinals})
        addresses = {o: await pod_address(runtime, broker, o) for o in ordinals}
        text = render_directory((p for p in placed.values() if p), addresses.get,
                                runtime.pod_zones.get(key))
        await fenced_apply(runtime.kube, build_directory_configmap(broker, text),
                           runtime.fencing_token())
