"""Operator settings, from the environment (the chart sets them on the Deployment)."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


@dataclass(frozen=True)
class Settings:
    #: Seconds between the timer passes that refresh status and repair drift.
    broker_interval: float = 15.0
    stream_interval: float = 15.0
    #: Seconds between the placement driver's ticks (probes of every pod of a Broker with
    #: replicated Streams; a leader missing 3 in a row is replaced).
    replication_interval: float = 1.0
    #: Port of the Prometheus /metrics endpoint; 0 turns it off.
    metrics_port: int = 9090
    #: The namespace the operator's pods run in (the chart sets it from the pod's own): the
    #: Brokers' NetworkPolicies let its pods in from there only. None: from any namespace.
    namespace: str | None = None
    #: The Spark image of the exports whose Stream names none (spec.export.image): the chart
    #: sets it from spark.image (a digest possible). Empty: builders.export.DEFAULT_IMAGE.
    spark_image: str = ""

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            broker_interval=_float("STREAMLET_OPERATOR_BROKER_INTERVAL", cls.broker_interval),
            stream_interval=_float("STREAMLET_OPERATOR_STREAM_INTERVAL", cls.stream_interval),
            replication_interval=_float("STREAMLET_OPERATOR_REPLICATION_INTERVAL",
                                        cls.replication_interval),
            metrics_port=int(os.environ.get("STREAMLET_OPERATOR_METRICS_PORT", cls.metrics_port)),
            namespace=os.environ.get("STREAMLET_OPERATOR_NAMESPACE") or None,
            spark_image=os.environ.get("STREAMLET_OPERATOR_SPARK_IMAGE", "").strip(),
        )


# Read once at import: kopf's timers take their interval when the handlers are registered.
SETTINGS = Settings.from_env()
