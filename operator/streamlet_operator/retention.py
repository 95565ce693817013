"""A Stream's retention changed after creation: applied as a broker policy (RabbitMQ's, the
brokers' /api/policies) named after the Stream, whose keys win over the Create arguments on
every pod. Pure: which definition the stream must run with (None: its Create arguments are
it), the policy entry the operator sends each pod (PolicySync), and status.retention."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .model import Retention

#: the Create arguments a policy may change after creation (the others stay fixed)
KEYS = ("max-age", "max-length-bytes", "stream-max-segment-size-bytes")
#: above any priority a user is likely to give: a Stream's spec is what its stream runs with
PRIORITY = 1_000_000_000
_STATUS = {"max-age": "maxAge", "max-length-bytes": "maxLengthBytes",
           "stream-max-segment-size-bytes": "maxSegmentSizeBytes"}


class NotApplied(Exception):
    """A pod did not take the policy sent (the Stream's condition says which)."""

    code = "RetentionNotApplied"


def policy_name(resource: str) -> str:
    return f"k8s-stream-{resource}"


def pattern(stream: str, partitions: int = 1) -> str:
    """The broker streams of the resource: the stream, or each partition of a super stream."""
    return f"^{re.escape(stream)}-[0-9]+$" if partitions > 1 else f"^{re.escape(stream)}$"


def retention_of(arguments: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in arguments.items() if k in KEYS}


def wanted(spec_arguments: Mapping[str, str], created: Mapping[str, str],
           defaults: Retention) -> dict[str, Any] | None:
    """The definition the stream must run with now, or None when the arguments it was created
    with are the spec's retention. Every key is set (a policy's key wins over the argument):
    spec.retention's, else the Broker's default, as for a stream created now."""
    spec = retention_of(spec_arguments)
    if spec == retention_of(created):
        return None
    return {"max-age": spec.get("max-age", defaults.max_age or "0s"),
            "max-length-bytes": int(spec.get("max-length-bytes",
                                             defaults.max_length_bytes or 0)),
            "stream-max-segment-size-bytes": int(spec.get(
                "stream-max-segment-size-bytes", defaults.max_segment_size_bytes or 500_000_000))}


def entry(resource: str, stream: str, partitions: int,
          definition: dict[str, Any] | None) -> dict[str, Any]:
    """The PolicySync entry for the resource's policy: version 0, as a change made on the pod
    that takes it; a deletion when ``definition`` is None."""
    name = policy_name(resource)
    if definition is None:
        return {"vhost": "/", "name": name, "version": 0, "origin": "", "deleted": True}
    return {"vhost": "/", "name": name, "pattern": pattern(stream, partitions),
            "apply-to": "streams", "priority": PRIORITY, "definition": definition,
            "version": 0, "origin": "", "deleted": False}


def holds(policies: list[dict[str, Any]], sent: dict[str, Any]) -> bool:
    """Whether a pod's policy set (its PolicySync answer) holds what was sent."""
    found = next((p for p in policies if p.get("vhost") == sent["vhost"]
                  and p.get("name") == sent["name"]), None)
    if sent["deleted"]:
        return found is None or bool(found.get("deleted"))
    return found is not None and not found.get("deleted") and all(
        found.get(k) == sent[k] for k in ("pattern", "apply-to", "priority", "definition"))


def status_of(resource: str, definition: dict[str, Any] | None) -> dict[str, Any] | None:
    """status.retention: the policy and its keys (None: the Create arguments run)."""
    if definition is None:
        return None
    return {"policy": policy_name(resource), **{_STATUS[k]: v for k, v in definition.items()}}


def definition_of(status: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The definition a status.retention records as applied on every pod."""
    if not status:
        return None
    back = {v: k for k, v in _STATUS.items()}
    return {back[k]: v for k, v in status.items() if k in back}
