"""The stream directory: which pod holds each stream, as a ConfigMap every broker pod mounts.

With it any pod answers Metadata for any stream of its Broker (broker/directory.py), so clients
can start from the client Service and follow the leader the answer names. Pure functions: the
reconciler (streamlet_operator/directory.py) gathers the placements and addresses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import names
from ..model import BrokerModel
from .common import metadata
from .configmap import DIRECTORY_FILE

DIRECTORY_DIR = DIRECTORY_FILE.rsplit("/", 1)[0]


@dataclass(frozen=True)
class Replicated:
    """A replicated stream's epoch, leader (None while electing) and members (pod ordinals)."""

    epoch: int
    leader: int | None
    members: tuple[int, ...]

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Replicated:
        return cls(int(doc["epoch"]), None if doc.get("leader") is None else int(doc["leader"]),
                   tuple(int(m) for m in doc.get("members") or ()))


@dataclass(frozen=True)
class Placed:
    """One Stream resource as created on its broker: its name there and its partitions' pods."""

    stream: str
    partitions: int
    placement: tuple[tuple[str, int], ...]  # (broker stream, pod ordinal)
    #: its members once the operator knows them (status.replication); None: one copy
    replicated: Replicated | None = None
    #: copies of each broker stream (status.applied.replicas)
    replicas: int = 1
    #: a replicated super stream's partitions' members, those the operator knows
    #: (status.partitionReplication), by partition
    partition_replicas: tuple[tuple[str, Replicated], ...] = ()

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> Placed | None:
        """From a Stream's status; None until it has been created somewhere."""
        applied, placed = status.get("applied"), status.get("placement")
        if not applied or not placed:
            return None
        rep = status.get("replication")
        replicated = None if not rep else Replicated.parse(rep)
        by_partition = status.get("partitionReplication") or {}
        return cls(str(applied["name"]), int(applied.get("partitions") or 1),
                   tuple((str(p["stream"]), int(p["ordinal"])) for p in placed), replicated,
                   int(applied.get("replicas") or 1),
                   tuple((str(n), Replicated.parse(d)) for n, d in sorted(by_partition.items())
                         if d))

    @property
    def ordinals(self) -> set[int]:
        """Every pod this entry names."""
        return {o for _, o in self.placement} | set(
            self.replicated.members if self.replicated else ()) | {
            m for _, r in self.partition_replicas for m in r.members}


def advertised_host(broker: BrokerModel, ordinal: int) -> str | None:
    """The host pod ``ordinal`` advertises (what the StatefulSet's env makes it); None in PodIP
    mode, where only the pod knows it."""
    adv, pod = broker.advertise, names.pod(broker.name, ordinal)
    if adv.mode == "PodIP":
        return None
    if adv.mode == "Template" and adv.host_template:
        return (adv.host_template.replace("{pod}", pod).replace("{ordinal}", str(ordinal))
                .replace("{broker}", broker.name).replace("{namespace}", broker.namespace))
    return names.pod_dns(broker.name, ordinal, broker.namespace, adv.cluster_domain)


def render_directory(placed: Iterable[Placed], address: Callable[[int], str | None],
                     zones: Mapping[int, str] | None = None) -> str:
    """The directory file's JSON (sorted: the same placements give the same bytes); ``zones``:
    each pod's zone, for the brokers' placement of new replicated streams (left out if none).

    ``address`` gives ``host:port`` for a pod ordinal, None when unknown (then left out: the
    other pods answer "does not exist" rather than name a wrong pod; a replicated stream's
    unknown leader is written as none, "being elected").
    """
    streams: dict[str, Any] = {}
    supers: dict[str, dict[str, list[str]]] = {}

    def replicated(r: Replicated) -> dict[str, Any]:
        # A replicated stream: its epoch, leader (null while electing: Metadata answers
        # 0xFFFF) and other members, as brokers read it (broker/directory.py).
        leader = None if r.leader is None else address(r.leader)
        replicas = [a for m in r.members if m != r.leader and (a := address(m)) is not None]
        return {"epoch": r.epoch, "leader": leader, "replicas": replicas}

    for p in placed:
        if p.replicated is not None and p.partitions <= 1:
            streams[p.stream] = replicated(p.replicated)
            continue
        known = dict(p.partition_replicas)
        for stream, ordinal in p.placement:
            if stream in known:  # a replicated super stream's partition
                streams[stream] = replicated(known[stream])
                continue
            if p.partitions > 1 and p.replicas > 1:
                # Its members not known yet: left out rather than named as one copy on the
                # Create's pod (a pod holding a copy would take that for a move, and seal it).
                continue
            where = address(ordinal)
            if where is not None:
                streams[stream] = where
        if p.partitions > 1:
            partitions = [s for s, _ in p.placement]
            # The operator creates super streams with binding keys "0".."n-1" (brokers.py).
            supers[p.stream] = {"partitions": partitions,
                                "binding_keys": [str(i) for i in range(len(partitions))]}
    doc: dict[str, Any] = {"streams": streams, "super_streams": supers}
    if zones:
        doc["zones"] = {str(o): z for o, z in zones.items()}
    return json.dumps(doc, indent=1, sort_keys=True)


def build_directory_configmap(broker: BrokerModel, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(broker, names.directory_configmap(broker.name)),
        "data": {names.DIRECTORY_KEY: text},
    }
