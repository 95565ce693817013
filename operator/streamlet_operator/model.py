"""Typed views of the Broker and Stream resources, with the CRDs' defaults applied.

The API server applies the CRD defaults on a real cluster; applying them again here keeps the
operator correct when it reads an object written before a default existed (or served by a test
API server that applies none). tests/chart check these defaults against the CRD files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

DEFAULT_IMAGE = "ghcr.io/streamlet/broker:0.1.0"
DEFAULT_PORT = 5552
DEFAULT_TLS_PORT = 5551
#: Broker.spec.scaleDownPolicy: move the streams off pods being removed (else: "Refuse").
MOVE_STREAMS = "MoveStreams"
#: Broker.spec.storage.fsync: the brokers' storage.fsync (docs/replication.md#what-a-confirm-means).
FSYNC_MODES = ("never", "interval", "chunk")


_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``30s``, ``5m``, ``1h30m`` or ``0`` (as Kubernetes writes
    them: whole or decimal numbers, each with a unit of h, m or s)."""
    text = text.strip()
    if text in ("0", ""):
        return 0.0
    parts = re.fullmatch(r"(?:\d+(?:\.\d+)?[hms])+", text)
    if parts is None:
        raise ValueError(f"not a duration: {text!r} (e.g. 30s, 5m, 1h)")
    return sum(float(n) * _UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([hms])", text))


@dataclass(frozen=True)
class Retention:
    max_age: str | None = None
    max_length_bytes: int | None = None
    max_segment_size_bytes: int | None = None

    @classmethod
    def parse(cls, doc: dict[str, Any] | None) -> Retention:
        doc = doc or {}
        return cls(
            max_age=doc.get("maxAge"),
            max_length_bytes=doc.get("maxLengthBytes"),
            max_segment_size_bytes=doc.get("maxSegmentSizeBytes"),
        )


@dataclass(frozen=True)
class Permission:
    """One of ``spec.permissions``: the broker config's [[permissions]] entry, field for field
    (regular expressions over stream names, searched as RabbitMQ does; "" denies all)."""

    user: str
    vhost: str = "/"
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Permission:
        return cls(user=str(doc.get("user") or ""), vhost=str(doc.get("vhost") or "/"),
                   configure=str(doc.get("configure", ".*")), write=str(doc.get("write", ".*")),
                   read=str(doc.get("read", ".*")))


@dataclass(frozen=True)
class Tls:
    """``spec.tls``: the broker's certificate, the CA of client certificates, the listeners."""

    secret: str
    port: int = DEFAULT_TLS_PORT
    #: a Secret whose ``ca.crt`` is the CA; None: the ``ca.crt`` of ``secret`` (cert-manager's)
    ca_secret: str | None = None
    #: require a client certificate signed by the CA (the broker's [tls] verify_peer)
    verify_peer: bool = False
    #: False: TLS only, no plaintext listener ([listeners.rabbitmq] enabled = false)
    plain_listener: bool = True
    #: a kubernetes.io/tls Secret with the certificate the operator presents to the brokers
    operator_client_secret: str | None = None
    #: the management API over HTTPS (15671) with the same certificate; False: plain HTTP only
    management: bool = True
    #: the metrics endpoint over HTTPS (15691) too, with the same certificate; False: plain only
    metrics: bool = True

    @classmethod
    def parse(cls, doc: Mapping[str, Any] | None) -> Tls | None:
        if not doc or not doc.get("secretName"):
            return None
        return cls(secret=str(doc["secretName"]), port=int(doc.get("port") or DEFAULT_TLS_PORT),
                   ca_secret=doc.get("caSecretName") or None,
                   verify_peer=bool(doc.get("verifyPeer", False)),
                   plain_listener=bool(doc.get("plainListener", True)),
                   operator_client_secret=doc.get("operatorClientSecret") or None,
                   management=bool(doc.get("management", True)),
                   metrics=bool(doc.get("metrics", True)))

    @property
    def ca_source(self) -> str:
        """The Secret whose ``ca.crt`` is the CA: caSecretName, else the TLS Secret."""
        return self.ca_secret or self.secret

    def clients_use_tls(self, ca_known: bool) -> bool:
        """Whether the operator's clients (its own connections, exports) use TLS: not when
        the plain listener is on and no CA is known to verify the brokers with (what worked
        before stays); TLS only, without a CA, with the system's CAs."""
        return ca_known or not self.plain_listener

    @property
    def cafile_wanted(self) -> bool:
        """Whether the broker gets a CA file: asked for (caSecretName) or needed (verifyPeer;
        TLS only). Not otherwise: a kubernetes.io/tls Secret made by hand may have no ca.crt,
        and the brokers' links then check each other against their shared certificate."""
        return self.verify_peer or self.ca_secret is not None or not self.plain_listener


@dataclass(frozen=True)
class Advertise:
    mode: str = "PodDNS"
    cluster_domain: str = "cluster.local"
    host_template: str | None = None
    port: int | None = None


@dataclass(frozen=True)
class NetworkPolicy:
    """spec.networkPolicy: who may reach the pods. A selector None is its default: clients
    from anywhere, management from the Broker's own namespace, metrics from every namespace."""

    enabled: bool = True
    client_namespaces: dict[str, Any] | None = None
    management_namespaces: dict[str, Any] | None = None
    metrics_namespaces: dict[str, Any] | None = None

    @classmethod
    def parse(cls, doc: Mapping[str, Any] | None) -> NetworkPolicy:
        doc = doc or {}

        def selector(key: str) -> dict[str, Any] | None:
            found = doc.get(key)
            return None if found is None else dict(found)

        return cls(enabled=bool(doc.get("enabled", True)),
                   client_namespaces=selector("clientNamespaces"),
                   management_namespaces=selector("managementNamespaces"),
                   metrics_namespaces=selector("metricsNamespaces"))


@dataclass(frozen=True)
class BrokerModel:
    name: str
    namespace: str
    uid: str
    generation: int
    replicas: int = 1
    scale_down_policy: str = "Refuse"
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    resources: dict[str, Any] = field(default_factory=dict)
    #: spec.logging: the brokers' --log-level (None: theirs, INFO) and JSON log lines
    log_level: str | None = None
    log_json: bool = False
    storage_size: str = "10Gi"
    storage_class: str | None = None
    port: int = DEFAULT_PORT
    tls: Tls | None = None
    users_secret: str | None = None
    #: spec.vhosts besides "/" (which the broker always has)
    vhosts: tuple[str, ...] = ()
    #: spec.permissions, then the operator's own (export users': handlers/broker.py adds them)
    permissions: tuple[Permission, ...] = ()
    retention: Retention = Retention("7D", 0, 500_000_000)
    advertise: Advertise = Advertise()
    pod_template: dict[str, Any] = field(default_factory=dict)
    #: spec.streams.defaultReplicas: copies of a Stream that sets no spec.replicas
    default_replicas: int = 1
    #: spec.replication.replaceAfter in seconds: a member whose pod is gone or not Ready this
    #: long is replaced on another pod (0: never)
    replace_after: float = 300.0
    #: spec.storage.fsync: when the brokers fsync what they write (FSYNC_MODES)
    fsync: str = "never"
    #: spec.replication.restorePreferredLeader: a stream's leadership goes back to its
    #: preferred leader once that member is in sync again (driver.py)
    restore_preferred_leader: bool = True
    #: spec.networkPolicy (builders/networkpolicy.py)
    network_policy: NetworkPolicy = NetworkPolicy()
    #: spec.rollout.notReadyTimeout in seconds: an outdated pod not Ready this long is rolled
    #: forward by the roll instead of waited for (0: waited for, for ever; rolling.py)
    not_ready_timeout: float = 300.0

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> BrokerModel:
        meta = body.get("metadata", {})
        spec = body.get("spec") or {}
        storage = spec.get("storage") or {}
        ret = spec.get("retention") or {}
        adv = spec.get("advertise") or {}
        return cls(
            name=meta["name"],
            namespace=meta.get("namespace") or "default",
            uid=meta.get("uid", ""),
            generation=int(meta.get("generation") or 0),
            replicas=int(spec.get("replicas", 1)),
            scale_down_policy=spec.get("scaleDownPolicy") or "Refuse",
            image=spec.get("image") or DEFAULT_IMAGE,
            image_pull_policy=spec.get("imagePullPolicy") or "IfNotPresent",
            resources=dict(spec.get("resources") or {}),
            log_level=(spec.get("logging") or {}).get("level"),
            log_json=bool((spec.get("logging") or {}).get("json", False)),
            storage_size=storage.get("size") or "10Gi",
            storage_class=storage.get("storageClassName"),
            port=int(spec.get("port") or DEFAULT_PORT),
            tls=Tls.parse(spec.get("tls")),
            users_secret=spec.get("usersSecret"),
            vhosts=tuple(dict.fromkeys(str(v) for v in spec.get("vhosts") or () if v != "/")),
            permissions=tuple(Permission.parse(p) for p in spec.get("permissions") or ()),
            retention=Retention(
                max_age=ret.get("maxAge", "7D"),
                max_length_bytes=int(ret.get("maxLengthBytes", 0)),
                max_segment_size_bytes=int(ret.get("maxSegmentSizeBytes", 500_000_000)),
            ),
            advertise=Advertise(
                mode=adv.get("mode") or "PodDNS",
                cluster_domain=adv.get("clusterDomain") or "cluster.local",
                host_template=adv.get("hostTemplate"),
                port=adv.get("port"),
            ),
            pod_template=dict(spec.get("podTemplate") or {}),
            default_replicas=int((spec.get("streams") or {}).get("defaultReplicas") or 1),
            replace_after=parse_duration(str((spec.get("replication") or {}).get(
                "replaceAfter") or "5m")),
            fsync=str(storage.get("fsync") or "never"),
            restore_preferred_leader=bool((spec.get("replication") or {}).get(
                "restorePreferredLeader", True)),
            network_policy=NetworkPolicy.parse(spec.get("networkPolicy")),
            not_ready_timeout=parse_duration(str((spec.get("rollout") or {}).get(
                "notReadyTimeout") or "5m")),
        )

    @property
    def tls_secret(self) -> str | None:
        return self.tls.secret if self.tls else None

    @property
    def tls_port(self) -> int:
        return self.tls.port if self.tls else DEFAULT_TLS_PORT

    @property
    def plain_listener(self) -> bool:
        """Whether the pods listen in plaintext on spec.port (else on the TLS port only)."""
        return self.tls is None or self.tls.plain_listener

    @property
    def replication_tls(self) -> bool:
        """Whether the brokers' links to each other use TLS (the rendered [cluster] tls):
        whenever the Broker has TLS, plain listener or not."""
        return self.tls is not None

    @property
    def peer_port(self) -> int:
        """Where the brokers reach each other (cluster.peers): the stream port, or the TLS
        port when they replicate over TLS."""
        return self.tls_port if self.replication_tls else self.port

    @property
    def leader_port(self) -> int:
        """The port an Assign names a leader by: the client port. A broker links to the member
        whose host that names, at its cluster.peers address (the TLS port with TLS), so the
        plain port is taken by brokers whose peers are plain ports (a config from before
        replication went over TLS beside the plain listener) and by the others alike."""
        return self.client_port

    @property
    def management_tls(self) -> bool:
        """Whether the pods serve the management API over HTTPS (spec.tls.management)."""
        return self.tls is not None and self.tls.management

    @property
    def metrics_tls(self) -> bool:
        """Whether the pods serve /metrics over HTTPS too (spec.tls.metrics), beside the plain
        port, which the readinessProbe uses and a TLS-only Broker keeps."""
        return self.tls is not None and self.tls.metrics

    @property
    def management_plain(self) -> bool:
        """Whether the pods serve the management API in plain HTTP: without HTTPS, or beside it
        while the plain stream listener is on (TLS only: no plaintext port at all)."""
        return not self.management_tls or self.plain_listener

    @property
    def client_port(self) -> int:
        """The port clients are given (Services, status, the stream directory): the plain one,
        or the TLS one when that is the only listener."""
        return self.port if self.plain_listener else self.tls_port


@dataclass(frozen=True)
class StreamModel:
    name: str  # the resource's name
    namespace: str
    stream: str  # the stream's name on the broker
    broker: str
    partitions: int = 1
    retention: Retention = Retention()
    filter_size_bytes: int | None = None
    deletion_policy: str = "delete"
    #: spec.replicas: copies of the stream; None: the Broker's spec.streams.defaultReplicas
    replicas: int | None = None

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> StreamModel:
        meta = body.get("metadata", {})
        spec = body.get("spec") or {}
        return cls(
            name=meta["name"],
            namespace=meta.get("namespace") or "default",
            stream=spec.get("name") or meta["name"],
            broker=spec.get("broker", ""),
            partitions=int(spec.get("partitions") or 1),
            retention=Retention.parse(spec.get("retention")),
            filter_size_bytes=spec.get("filterSizeBytes"),
            deletion_policy=spec.get("deletionPolicy") or "delete",
            replicas=None if spec.get("replicas") is None else int(spec["replicas"]),
        )

    @property
    def partition_names(self) -> list[str]:
        """The broker streams behind this resource: itself, or its partitions."""
        if self.partitions <= 1:
            return [self.stream]
        return [f"{self.stream}-{i}" for i in range(self.partitions)]

    def create_arguments(self) -> dict[str, str]:
        """The protocol's Create arguments; unset settings take the broker's defaults."""
        args: dict[str, str] = {}
        if self.retention.max_age is not None:
            args["max-age"] = self.retention.max_age
        if self.retention.max_length_bytes is not None:
            args["max-length-bytes"] = str(self.retention.max_length_bytes)
        if self.retention.max_segment_size_bytes is not None:
            args["stream-max-segment-size-bytes"] = str(self.retention.max_segment_size_bytes)
        if self.filter_size_bytes is not None:
            args["stream-filter-size-bytes"] = str(self.filter_size_bytes)
        return args

    def immutable(self) -> dict[str, Any]:
        """The settings fixed at creation, as recorded in status.applied."""
        fixed: dict[str, Any] = {
            "name": self.stream,
            "broker": self.broker,
            "partitions": self.partitions,
            "arguments": self.create_arguments(),
        }
        # Unset: the Broker's default, resolved when created (plan.plan_stream records it,
        # only when above 1: an absent "replicas" is one copy, as streams made before it).
        if self.replicas is not None:
            fixed["replicas"] = self.replicas
        return fixed


class Phase(StrEnum):
    """A Stream's ``status.phase`` (the one place these strings are written)."""

    PENDING = "Pending"  # not created yet: no Broker, or its pod does not answer
    MOVING = "Moving"  # on the new pod; the old one has still to seal and be emptied
    DEGRADED = "Degraded"  # created once, but its pod does not answer now
    READY = "Ready"


#: How ``status.move.started`` is written.
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Placement:
    """One broker stream of a Stream resource and the pod holding it (``status.placement``)."""

    stream: str
    pod: str
    ordinal: int

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Placement:
        return cls(str(doc["stream"]), str(doc["pod"]), int(doc["ordinal"]))

    def to_dict(self) -> dict[str, Any]:
        return {"stream": self.stream, "pod": self.pod, "ordinal": self.ordinal}


@dataclass(frozen=True)
class Move:
    """A move in progress (``status.move``): the stream leaves pod ``source`` for ``target``."""

    source: int
    target: int
    started: datetime

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Move:
        started = datetime.strptime(doc["started"], TIME_FORMAT).replace(tzinfo=UTC)
        return cls(int(doc["from"]), int(doc["to"]), started)

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target,
                "started": self.started.strftime(TIME_FORMAT)}


@dataclass(frozen=True)
class StreamStatus:
    """The fields of a Stream's status the Stream reconciler owns; None: not set.

    ``from_status``/``to_status`` keep what they do not know (the export's fields) untouched.
    """

    observed_generation: int | None = None
    phase: str | None = None
    leader: str | None = None
    partitions: int | None = None
    placement: tuple[Placement, ...] | None = None
    #: the settings fixed at creation (StreamModel.immutable() of then); None until created
    applied: dict[str, Any] | None = None
    move: Move | None = None
    first_offset: int | None = None
    committed_offset: int | None = None
    last_offset: int | None = None
    size: int | None = None
    conditions: tuple[dict[str, Any], ...] | None = None

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> StreamStatus:
        st = status or {}
        placement, move = st.get("placement"), st.get("move")
        return cls(
            observed_generation=st.get("observedGeneration"),
            phase=st.get("phase"),
            leader=st.get("leader"),
            partitions=st.get("partitions"),
            placement=None if placement is None else tuple(Placement.parse(p) for p in placement),
            applied=st.get("applied"),
            move=Move.parse(move) if move else None,
            first_offset=st.get("firstOffset"),
            committed_offset=st.get("committedOffset"),
            last_offset=st.get("lastOffset"),
            size=st.get("size"),
            conditions=None if st.get("conditions") is None else tuple(st["conditions"]),
        )

    def fields(self) -> dict[str, Any]:
        """Every owned field by its status name, None where unset."""
        return {
            "observedGeneration": self.observed_generation,
            "phase": None if self.phase is None else str(self.phase),
            "leader": self.leader,
            "partitions": self.partitions,
            "placement": (None if self.placement is None
                          else [p.to_dict() for p in self.placement]),
            "applied": self.applied,
            "move": self.move.to_dict() if self.move else None,
            "firstOffset": self.first_offset,
            "committedOffset": self.committed_offset,
            "lastOffset": self.last_offset,
            "size": self.size,
            "conditions": None if self.conditions is None else [dict(c) for c in self.conditions],
        }

    def to_status(self, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``base`` (the status as read) with these fields over it. A field unset here stays
        out unless ``base`` has it, and is then None: a merge patch with null drops it."""
        result = dict(base or {})
        for key, value in self.fields().items():
            if value is not None or result.get(key) is not None:
                result[key] = value
        return result


@dataclass(frozen=True)
class StreamStats:
    """What a broker pod says of one stream it holds (brokers.py reads it; plan.py decides on it)."""

    first_offset: int
    committed_offset: int
    last_offset: int
    #: the pod's directory names another pod for it (a move switched it): no more publishing
    sealed: bool = False

    @property
    def size(self) -> int:
        """Messages from the first chunk to the committed chunk's start: a lower bound."""
        if self.committed_offset < 0 or self.first_offset < 0:
            return 0
        return max(0, self.committed_offset - self.first_offset)
