"""Pure helpers of the kind test (test_kind.py), tested without a cluster (test_checks.py): the
numbered bodies a client pod publishes, the consumer's output read back, what a replicated
Stream's status says of its leader, and the confirmed messages a consumer did not get."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: one message body: a batch name and a number from 1, sortable as text
BODY = "{batch}-{number:06d}"


def bodies(batch: str, count: int) -> list[str]:
    """The bodies ``produce_script`` publishes, in order."""
    return [BODY.format(batch=batch, number=i) for i in range(1, count + 1)]


def produce_script(batch: str, count: int, stream: str, connection: Sequence[str]) -> str:
    """A shell command for a client pod (the broker image: sh, python, the streamlet CLI) that
    publishes ``bodies(batch, count)``, one per line, and exits 0 only once every one of them
    is confirmed (`streamlet produce` waits for every confirm and fails on a publish error)."""
    generate = (f"for i in range(1, {count + 1}): "
                f"print({BODY!r}.format(batch={batch!r}, number=i))")
    produce = ["streamlet", "produce", stream, *connection]
    return f"python -c {shlex.quote(generate)} | {shlex.join(produce)}"


@dataclass(frozen=True)
class Consumed:
    """`streamlet consume`'s output: one ``offset<TAB>body`` line a message; other lines (its
    notes on standard error, which a pod's log holds too) are not messages."""

    offsets: tuple[int, ...]
    bodies: tuple[str, ...]

    @classmethod
    def parse(cls, log: str) -> Consumed:
        offsets, found = [], []
        for line in log.splitlines():
            offset, tab, body = line.partition("\t")
            if tab and offset.isdigit():
                offsets.append(int(offset))
                found.append(body)
        return cls(tuple(offsets), tuple(found))

    def in_order(self) -> bool:
        """Each offset above the one before: no message twice, none out of order."""
        return all(a < b for a, b in zip(self.offsets, self.offsets[1:], strict=False))

    def lost(self, confirmed: Iterable[str]) -> list[str]:
        """The confirmed bodies it did not get, in their order."""
        got = set(self.bodies)
        return [body for body in confirmed if body not in got]

    def duplicates(self) -> list[str]:
        seen: set[str] = set()
        twice = []
        for body in self.bodies:
            if body in seen:
                twice.append(body)
            seen.add(body)
        return twice


@dataclass(frozen=True)
class Leadership:
    """A replicated Stream's ``status.replication`` as far as a failover goes."""

    epoch: int
    #: the leader's pod ordinal; None while none is elected
    leader: int | None
    members: tuple[int, ...]
    in_sync: tuple[int, ...]
    phase: str | None

    @classmethod
    def of(cls, stream: Mapping[str, Any]) -> Leadership | None:
        """From a Stream object (as ``kubectl get -o json`` gives it); None until the operator
        has recorded it as replicated."""
        record = ((stream.get("status") or {}).get("replication")) or None
        if not record or record.get("epoch") is None:
            return None
        leader = record.get("leader")
        return cls(int(record["epoch"]), None if leader is None else int(leader),
                   tuple(record.get("members") or ()), tuple(record.get("inSync") or ()),
                   record.get("phase"))

    def settled(self, replicas: int) -> bool:
        """Led, Ready, with ``replicas`` members all in sync: a loss now keeps a quorum."""
        return (self.leader is not None and self.phase == "Ready"
                and len(self.members) == replicas and set(self.in_sync) == set(self.members))

    def after(self, before: Leadership) -> bool:
        """A leader elected in a later epoch than ``before``'s, and Ready."""
        return self.epoch > before.epoch and self.leader is not None and self.phase == "Ready"

