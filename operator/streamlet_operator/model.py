"""Typed views of the Broker and Stream resources, with the CRDs' defaults applied.

The API server applies the CRD defaults on a real cluster; applying them again here keeps the
operator correct when it reads an object written before a default existed (or served by a test
API server that applies none). tests/chart check these defaults against the CRD files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_IMAGE = "ghcr.io/streamlet/broker:0.1.0"
DEFAULT_PORT = 5552
DEFAULT_TLS_PORT = 5551


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
class Advertise:
    mode: str = "PodDNS"
    cluster_domain: str = "cluster.local"
    host_template: str | None = None
    port: int | None = None


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
    storage_size: str = "10Gi"
    storage_class: str | None = None
    port: int = DEFAULT_PORT
    tls_secret: str | None = None
    tls_port: int = DEFAULT_TLS_PORT
    users_secret: str | None = None
    retention: Retention = Retention("7D", 0, 500_000_000)
    advertise: Advertise = Advertise()
    pod_template: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> BrokerModel:
        meta = body.get("metadata", {})
        spec = body.get("spec") or {}
        storage = spec.get("storage") or {}
        tls = spec.get("tls") or {}
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
            storage_size=storage.get("size") or "10Gi",
            storage_class=storage.get("storageClassName"),
            port=int(spec.get("port") or DEFAULT_PORT),
            tls_secret=tls.get("secretName"),
            tls_port=int(tls.get("port") or DEFAULT_TLS_PORT),
            users_secret=spec.get("usersSecret"),
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
        )


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
        return {
            "name": self.stream,
            "broker": self.broker,
            "partitions": self.partitions,
            "arguments": self.create_arguments(),
        }
