"""Policies as RabbitMQ has them, for streams: a name per vhost, a regex on stream names, an
apply-to, a priority and a definition of retention keys (max-age, max-length-bytes,
stream-max-segment-size-bytes). Of the policies matching a stream the one of highest priority
applies (a tie: the first name); each key it defines wins over the stream's Create argument,
the others keep what the stream was made with (RabbitMQ's stream queues: policy_precedence).
Pure: a definition checked, the effective settings, and two brokers' sets merged (every entry
stamped with a version and its origin, a deletion kept as a tombstone: the newest wins)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ...core.settings import StreamSettings
from ..config.model import MAX_SEGMENT_BYTES, ConfigError
from ..config.values import parse_duration_ms

#: what a definition may hold for a stream, and what each takes
KEYS = {"max-age": "a duration as RabbitMQ writes it: a number and one of Y M D h m s, e.g. 7D",
        "max-length-bytes": "a whole number of bytes, 0 or more (0: no limit)",
        "stream-max-segment-size-bytes": f"a whole number of bytes, 1..{MAX_SEGMENT_BYTES}"}
#: RabbitMQ's apply-to values; a stream is a queue of type stream, so the first three reach it
APPLY_TO = ("all", "queues", "streams", "classic_queues", "quorum_queues", "exchanges")
REACH_STREAMS = ("all", "queues", "streams")


@dataclass(frozen=True)
class Policy:
    vhost: str
    name: str
    pattern: str = ""
    apply_to: str = "all"
    priority: int = 0
    definition: dict[str, Any] = field(default_factory=dict)
    #: the order of changes across brokers: (version, origin) of the newest wins a merge
    version: int = 0
    origin: str = ""
    deleted: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.vhost, self.name)

    @property
    def stamp(self) -> tuple[int, str]:
        return (self.version, self.origin)

    def applies(self, stream: str) -> bool:
        return (not self.deleted and self.apply_to in REACH_STREAMS
                and re.search(self.pattern, stream) is not None)

    def view(self) -> dict[str, Any]:
        """RabbitMQ's shape (GET /api/policies)."""
        return {"vhost": self.vhost, "name": self.name, "pattern": self.pattern,
                "apply-to": self.apply_to, "definition": dict(self.definition),
                "priority": self.priority}

    def to_json(self) -> dict[str, Any]:
        return {**self.view(), "version": self.version, "origin": self.origin,
                "deleted": self.deleted}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def check_definition(definition: Any) -> str | None:
    """Why a definition is refused (RabbitMQ answers such a PUT 400), None when it is valid."""
    if not isinstance(definition, dict):
        return "definition must be a JSON object"
    if not definition:
        return "Validation failed\n\nno policy provided\n"
    unknown = sorted(set(definition) - set(KEYS))
    if unknown:
        return (f"Validation failed\n\n{unknown} are not recognised policy settings: a stream "
                f"takes {', '.join(KEYS)}\n")
    for key, value in definition.items():
        if key == "max-age":
            try:
                ok = isinstance(value, str) and parse_duration_ms(value) >= 0
            except ConfigError:
                ok = False
        else:
            n = _int(value)
            ok = n is not None and (n >= 0 if key == "max-length-bytes"
                                    else 1 <= n <= MAX_SEGMENT_BYTES)
        if not ok:
            return f"Validation failed\n\n{json.dumps(value)} is not a valid {key}: {KEYS[key]}\n"
    return None


def parse(doc: Any, vhost: str, name: str) -> Policy | str:
    """A policy from a PUT's JSON body (RabbitMQ's shape), or why it is refused."""
    if not isinstance(doc, dict):
        return "the body is not a JSON object"
    pattern = doc.get("pattern")
    if not isinstance(pattern, str):
        return "pattern is required: a regular expression on stream names"
    try:
        re.compile(pattern)
    except re.error as e:
        return f"pattern {pattern!r} is not a valid regular expression: {e}"
    apply_to = doc.get("apply-to") or "all"
    if apply_to not in APPLY_TO:
        return f"apply-to must be one of {', '.join(APPLY_TO)}, not {apply_to!r}"
    priority = _int(doc.get("priority", 0))
    if priority is None:
        return f"priority must be an integer, not {json.dumps(doc.get('priority'))}"
    if "definition" not in doc:
        return "definition is required: a JSON object of policy keys"
    why = check_definition(doc["definition"])
    if why is not None:
        return why
    definition = {k: (v if k == "max-age" else _int(v)) for k, v in doc["definition"].items()}
    return Policy(vhost, name, pattern, apply_to, priority, definition)


def from_json(doc: Any) -> Policy:
    """An entry as stored or as a peer sent it; ValueError when it is not a valid one."""
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str)
                                            for k in ("vhost", "name", "origin")):
        raise ValueError(f"not a policy entry: {doc!r}")
    version, deleted = _int(doc.get("version")), doc.get("deleted", False)
    if version is None or not isinstance(deleted, bool):
        raise ValueError(f"policy {doc['name']!r}: version and deleted are required")
    if deleted:
        return Policy(doc["vhost"], doc["name"], version=version, origin=doc["origin"],
                      deleted=True)
    found = parse(doc, doc["vhost"], doc["name"])
    if isinstance(found, str):
        raise ValueError(f"policy {doc['name']!r}: {found}")
    return replace(found, version=version, origin=doc["origin"])


def effective(policies: Iterable[Policy], vhost: str, stream: str) -> Policy | None:
    """The policy that applies to ``stream`` in ``vhost``: the highest priority among those
    matching, the first name on a tie (RabbitMQ applies one policy, never a blend)."""
    found = [p for p in policies if p.vhost == vhost and p.applies(stream)]
    return min(found, key=lambda p: (-p.priority, p.name)) if found else None


def effective_settings(created: StreamSettings, policy: Policy | None) -> StreamSettings:
    """What the stream runs with: each key the policy defines, else what it was made with."""
    if policy is None:
        return created
    d = policy.definition
    out = created
    if "max-age" in d:
        out = replace(out, max_age_ms=parse_duration_ms(d["max-age"]) or None)
    if "max-length-bytes" in d:
        out = replace(out, max_length_bytes=d["max-length-bytes"] or None)
    if "stream-max-segment-size-bytes" in d:
        out = replace(out, max_segment_size_bytes=d["stream-max-segment-size-bytes"])
    return out


class PolicySet:
    """Every policy this broker knows, tombstones included, by (vhost, name)."""

    def __init__(self, entries: Iterable[Policy] = ()) -> None:
        self.entries: dict[tuple[str, str], Policy] = {p.key: p for p in entries}

    def live(self, vhost: str | None = None) -> list[Policy]:
        return sorted((p for p in self.entries.values()
                       if not p.deleted and (vhost is None or p.vhost == vhost)),
                      key=lambda p: p.key)

    def get(self, vhost: str, name: str) -> Policy | None:
        p = self.entries.get((vhost, name))
        return None if p is None or p.deleted else p

    def next_version(self, now_ms: int) -> int:
        """Later than the clock and than every version seen (a clock set back orders still)."""
        return max([now_ms, *(p.version + 1 for p in self.entries.values())])

    def change(self, policy: Policy, now_ms: int, origin: str) -> Policy:
        """A change made here (a PUT, a DELETE as a tombstone), stamped; returns it."""
        stamped = replace(policy, version=self.next_version(now_ms), origin=origin)
        self.entries[policy.key] = stamped
        return stamped

    def merge(self, entries: Iterable[Policy]) -> list[Policy]:
        """Take each entry newer than the one held; returns those taken."""
        taken = []
        for p in entries:
            held = self.entries.get(p.key)
            if held is None or p.stamp > held.stamp:
                self.entries[p.key] = p
                taken.append(p)
        return taken

    def to_json(self) -> list[dict[str, Any]]:
        return [p.to_json() for _, p in sorted(self.entries.items())]

    @classmethod
    def from_json(cls, doc: Any) -> PolicySet:
        if not isinstance(doc, list):
            raise ValueError("not a list of policy entries")
        return cls(from_json(d) for d in doc)
