"""Where streams go, in which zones, and which member leads them: pure functions of the
cluster state, so they are tested without one (the pods' zones from their Nodes, the planned
transfers of a rebalance and of preferred leaders restored). Mechanism:
docs/replication.md#on-kubernetes."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from streamlet.replication.membership import Led, preferred_moves
from streamlet.replication.membership import rebalance as rebalance_moves
from streamlet.replication.placement import Pod


def stream_counts(placements: Iterable[Iterable[int]], replicas: int) -> list[int]:
    """Streams per pod ordinal 0..replicas-1 (ordinals beyond replicas are not counted)."""
    counts = [0] * replicas
    for ordinals in placements:
        for ordinal in ordinals:
            if 0 <= ordinal < replicas:
                counts[ordinal] += 1
    return counts


def place(counts: list[int], weight: int = 1, avoid: Collection[int] = ()) -> int:
    """The pod ordinal for a new stream: the one holding fewest streams, lowest on a tie,
    among those not in ``avoid`` (drained, drain.py); among all when every pod is drained (a
    Stream created then is placed rather than refused; the Drained condition names it).

    ``weight`` is how many broker streams the new resource holds (a super stream's partitions
    all go on one pod); it does not change the choice, only what callers add afterwards.
    """
    if not counts:
        raise ValueError("a broker with no pods has nowhere to place a stream")
    del weight
    allowed = [i for i in range(len(counts)) if i not in avoid] or list(range(len(counts)))
    return min(allowed, key=lambda i: (counts[i], i))


def blocked_scale_down(
    placements: Mapping[str, Iterable[int]], replicas: int
) -> dict[str, list[int]]:
    """Streams (by resource name) placed on pods a scale-down to ``replicas`` would remove."""
    blocked: dict[str, list[int]] = {}
    for name, ordinals in placements.items():
        stranded = sorted(o for o in ordinals if o >= replicas)
        if stranded:
            blocked[name] = stranded
    return blocked


def effective_replicas(desired: int, placements: Mapping[str, Iterable[int]]) -> int:
    """The replica count the StatefulSet may have: never below a pod that holds a stream."""
    highest = max((o for ordinals in placements.values() for o in ordinals), default=-1)
    return max(desired, highest + 1)


def members_held(streams: Iterable[tuple[str, Sequence[int] | None]],
                 pods: int) -> dict[str, list[int]]:
    """The pods each replicated stream (by resource name) keeps: its members, which a
    scale-down may not remove until the placement driver has moved them (driver.py); every
    one of the ``pods`` while its members are not known yet (``None``: created, not yet
    discovered by the placement driver)."""
    return {name: list(members) if members is not None else list(range(pods))
            for name, members in streams}


# --- zones ---------------------------------------------------------------------------------------

#: The Node label a pod's zone is read from (the well-known one the cloud providers set).
ZONE_LABEL = "topology.kubernetes.io/zone"


def pod_zones(pods: Mapping[int, Mapping[str, Any]],
              nodes: Mapping[str, Mapping[str, Any]]) -> dict[int, str | None]:
    """Each pod's zone by ordinal: the ZONE_LABEL of the Node it runs on (``spec.nodeName``);
    None when it is not scheduled, its Node is not known (not readable: no permission) or
    not labelled, or the label is empty."""
    zones: dict[int, str | None] = {}
    for ordinal, pod in pods.items():
        node = nodes.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        zones[ordinal] = str(labels.get(ZONE_LABEL) or "") or None
    return zones


def member_pods(pods: Mapping[int, Mapping[str, Any]], zones: Mapping[int, str | None],
                replicas: int, avoid: Collection[int] = (),
                up: Collection[int] | None = None) -> list[Pod]:
    """The Broker's pods as membership.next_change and the placement rules see them: ordinals
    0..``replicas``-1 and any other pod that exists, each with its zone (``zones``); draining
    when being deleted, beyond ``replicas`` (a scale-down removes it) or in ``avoid`` (drained);
    ready when its Pod's Ready condition is True and, given ``up`` (the pods answering
    probes), it answers (then a pod without a Pod object, as in tests, is ready when it does)."""
    ordinals = sorted(set(range(replicas)) | set(pods) | set(up or ()))
    result = []
    for o in ordinals:
        pod = pods.get(o)
        terminating = bool(((pod or {}).get("metadata") or {}).get("deletionTimestamp"))
        result.append(Pod(o, zones.get(o), terminating or o >= replicas or o in avoid,
                          pod_ready(pod, up is not None) and (up is None or o in up)))
    return result


def pod_ready(pod: Mapping[str, Any] | None, absent: bool = False) -> bool:
    """Whether a Pod's Ready condition is True (``absent``: what a missing Pod object says)."""
    if pod is None:
        return absent
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


# --- leaderships ---------------------------------------------------------------------------------

#: The Broker annotation that asks for a leader rebalance (any value; removed once done).
REBALANCE = "streamlet.dev/rebalance"


def leadership_moves(streams: Mapping[str, Led], pods: Collection[int],
                     preferred: Mapping[str, int], *, rebalance: bool, restore: bool
                     ) -> list[tuple[str, int]]:
    """The planned transfers ``(stream, new leader)`` to carry out now, one after another.

    ``streams``: the replicated streams (and partitions) looked at this tick, by key;
    ``pods``: the ordinals that may lead (ready, staying, not drained); ``preferred``: each
    stream's preferred leader. A rebalance asked for: membership.rebalance over ``pods``.
    Otherwise, with ``restore``: each stream back to its preferred leader once that member is
    in sync (membership.preferred_moves), unless it is on a pod that may not lead.
    """
    allowed = set(pods)
    if rebalance:
        return rebalance_moves(streams, sorted(allowed))
    if not restore:
        return []
    return [(name, target) for name, target in preferred_moves(streams, preferred)
            if target in allowed]


def preferred_leaders(records: Mapping[str, tuple[int | None, int | None]]) -> dict[str, int]:
    """The preferred leader to record for each stream that has none yet, from ``records``:
    key -> (recorded preferred leader or None, leader or None). Recorded at the first look
    after discovery, the leader is the member placed to lead it at creation (epoch 1); a
    stream discovered before preferred leaders were recorded takes its leader of then."""
    return {key: leader for key, (recorded, leader) in records.items()
            if recorded is None and leader is not None}
