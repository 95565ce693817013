"""Super streams: a name, its partition streams (in order) and one binding key per partition.

RabbitMQ keeps a super stream as a direct exchange bound to its partitions; here it is a record
in ``<vhost root>/superstreams.json``, rewritten whole and atomically on every change. Route is
an exact binding-key match, as a direct exchange has it.

What goes wrong is said in the core's terms: a create refused raises ``SuperStreamRefused``
with a neutral ``Denial`` (an adapter maps it to its own code), an unreadable record
``SuperStreamsUnreadable``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TypeGuard

from .names import valid_stream_name


class Denial(Enum):
    """Why a virtual host did not create a super stream."""

    INVALID = "the definition is not acceptable (names, partitions, binding keys)"
    EXISTS = "the super stream, or a stream named as a partition, exists"
    LIMIT = "a limit would be passed (partitions per super stream, streams, descriptors)"
    FAILED = "a partition or the record could not be written (nothing is left behind)"


class SuperStreamRefused(Exception):
    """A create refused: ``reason`` for the adapter's code, ``why`` (the message) for its log."""

    def __init__(self, reason: Denial, why: str) -> None:
        super().__init__(why)
        self.reason = reason
        self.why = why


class SuperStreamsUnreadable(Exception):
    """The super streams record cannot be read: the virtual host does not start (one line)."""


@dataclass(frozen=True)
class SuperStream:
    name: str
    partitions: tuple[str, ...]
    binding_keys: tuple[str, ...]
    #: the Create arguments the partitions were made with (to re-create one lost in a crash)
    arguments: tuple[tuple[str, str], ...] = ()

    def route(self, routing_key: str) -> list[str]:
        return [p for p, k in zip(self.partitions, self.binding_keys, strict=True) if k == routing_key]

    def to_json(self) -> dict[str, object]:
        return {"partitions": list(self.partitions), "binding_keys": list(self.binding_keys),
                "arguments": dict(self.arguments)}

    @classmethod
    def from_json(cls, name: str, doc: object) -> SuperStream:
        """Raise ValueError when ``doc`` is not a super stream record."""
        if not isinstance(doc, dict):
            raise ValueError(f"super stream {name!r}: not an object")
        partitions, keys, args = doc.get("partitions"), doc.get("binding_keys"), doc.get("arguments") or {}
        if not (_strings(partitions) and _strings(keys) and len(partitions) == len(keys)):
            raise ValueError(f"super stream {name!r}: partitions and binding_keys must be lists "
                             "of strings of one length")
        if not isinstance(args, dict):
            raise ValueError(f"super stream {name!r}: arguments must be an object")
        return cls(name, tuple(partitions), tuple(keys),
                   tuple(sorted((str(k), str(v)) for k, v in args.items())))


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def validate(name: str, partitions: list[str], binding_keys: list[str]) -> str | None:
    """None if the definition is acceptable, else why not (``Denial.INVALID``)."""
    why = valid_stream_name(name)
    if why is not None:
        return f"super stream name: {why}"
    if not partitions:
        return "a super stream needs at least one partition"
    if len(partitions) != len(binding_keys):
        return f"{len(partitions)} partitions but {len(binding_keys)} binding keys"
    if len(set(partitions)) != len(partitions):
        return "partition names must be distinct"
    if len(set(binding_keys)) != len(binding_keys):
        return "binding keys must be distinct"
    for p in partitions:
        why = valid_stream_name(p)
        if why is not None:
            return f"partition {p!r}: {why}"
    return None


class SuperStreams:
    """The super streams of one virtual host, persisted in one small JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: dict[str, SuperStream] = {}
        if path.is_file():
            try:
                doc = json.loads(path.read_text())
                if not isinstance(doc, dict):
                    raise ValueError("not an object of super streams")
                for name, entry in doc.items():
                    self.items[name] = SuperStream.from_json(name, entry)
            except (OSError, ValueError) as e:  # UnicodeDecodeError and JSON's are ValueErrors
                raise SuperStreamsUnreadable(f"cannot read {path}: {e}") from e

    def get(self, name: str) -> SuperStream | None:
        return self.items.get(name)

    def add(self, ss: SuperStream) -> None:
        self.items[ss.name] = ss
        self._save()

    def remove(self, name: str) -> SuperStream | None:
        ss = self.items.pop(name, None)
        if ss is not None:
            self._save()
        return ss

    def forget_partition(self, stream: str) -> None:
        """A partition stream was deleted on its own: unbind it, as RabbitMQ does when a
        partition queue goes (the super stream stays, with the other partitions)."""
        changed = False
        for name, ss in list(self.items.items()):
            if stream in ss.partitions:
                kept = [(p, k) for p, k in zip(ss.partitions, ss.binding_keys, strict=True) if p != stream]
                self.items[name] = SuperStream(name, tuple(p for p, _ in kept),
                                               tuple(k for _, k in kept), ss.arguments)
                changed = True
        if changed:
            self._save()

    def _save(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({n: s.to_json() for n, s in sorted(self.items.items())}, indent=1))
        os.replace(tmp, self.path)

