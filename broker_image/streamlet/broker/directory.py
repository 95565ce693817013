"""The stream directory: where streams this broker does not hold live, so it can answer for them.

A directory file, written by the operator (or the local placement driver) and mounted into every
pod, maps stream names (``<vhost>/<stream>``, or the name alone for ``/``) to the advertised
``host:port`` of the broker holding them, or for a replicated stream to its epoch, leader and
replicas, super streams to their partitions, and member ids to their zones (which a replicated
Create's placement spreads the members over). A stream held here whose entry names another
broker is sealed (``seal_changes``). The file is read again when it changes; one that cannot be
read keeps the last good one. All but ``DirectoryFile`` is pure.
Format: docs/configuration.md#the-stream-directory.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rabbitmq import Code
from ..rabbitmq.constants import NO_LEADER

log = logging.getLogger("streamlet.broker")

Address = tuple[str, int]
#: How often, at most, the file's stat is looked at.
CHECK_INTERVAL_S = 1.0


class DirectoryError(ValueError):
    """The directory's content cannot be used; the message says where."""


@dataclass(frozen=True)
class SuperStreamEntry:
    partitions: tuple[str, ...]
    binding_keys: tuple[str, ...]

    def route(self, routing_key: str) -> list[str]:
        return [p for p, k in zip(self.partitions, self.binding_keys, strict=True)
                if k == routing_key]


@dataclass(frozen=True)
class Placement:
    """Where a replicated stream lives: its leader (None while electing) and other members."""

    epoch: int
    leader: Address | None
    replicas: tuple[Address, ...] = ()

    @property
    def members(self) -> tuple[Address, ...]:
        return self.replicas if self.leader is None else (self.leader, *self.replicas)


@dataclass(frozen=True)
class Directory:
    streams: Mapping[str, Address] = field(default_factory=dict)
    super_streams: Mapping[str, SuperStreamEntry] = field(default_factory=dict)
    replicated: Mapping[str, Placement] = field(default_factory=dict)
    #: each member id's zone, as the operator read it from the Nodes (placement spreads a new
    #: stream's members over zones); empty when not known
    zones: Mapping[int, str] = field(default_factory=dict)

    def leader(self, vhost: str, stream: str) -> Address | None:
        """Where a stream's writes go: the one broker of an unreplicated stream, a replicated
        one's leader (None: unknown here, or being elected)."""
        k = key(vhost, stream)
        placement = self.replicated.get(k)
        return placement.leader if placement is not None else self.streams.get(k)

    def placement(self, vhost: str, stream: str) -> Placement | None:
        return self.replicated.get(key(vhost, stream))

    def super_stream(self, vhost: str, name: str) -> SuperStreamEntry | None:
        return self.super_streams.get(key(vhost, name))


EMPTY = Directory()


def key(vhost: str, name: str) -> str:
    return name if vhost == "/" else f"{vhost}/{name}"


def parse_address(text: Any) -> Address:
    if not isinstance(text, str) or ":" not in text:
        raise DirectoryError(f"expected 'host:port', got {text!r}")
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1]:5552
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DirectoryError(f"expected 'host:port', got {text!r}")
    return host, int(port)


def parse_placement(doc: dict[str, Any]) -> Placement:
    epoch, leader, replicas = doc.get("epoch"), doc.get("leader"), doc.get("replicas", [])
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise DirectoryError(f"'epoch' must be a positive integer, got {epoch!r}")
    if not isinstance(replicas, list):
        raise DirectoryError(f"'replicas' must be a list, got {replicas!r}")
    return Placement(epoch, None if leader is None else parse_address(leader),
                     tuple(parse_address(r) for r in replicas))


def parse(text: str) -> Directory:
    """The directory in ``text`` (JSON); DirectoryError if it is not one."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise DirectoryError(f"not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise DirectoryError("expected a JSON object")
    streams_doc = doc.get("streams", {})
    supers_doc = doc.get("super_streams", {})
    if not isinstance(streams_doc, dict) or not isinstance(supers_doc, dict):
        raise DirectoryError("'streams' and 'super_streams' must be objects")
    streams = {}
    replicated = {}
    for name, entry in streams_doc.items():
        try:
            if isinstance(entry, dict):
                replicated[name] = parse_placement(entry)
            else:
                streams[name] = parse_address(entry)
        except DirectoryError as e:
            raise DirectoryError(f"streams[{name!r}]: {e}") from None
    supers = {}
    for name, entry in supers_doc.items():
        parts = entry.get("partitions") if isinstance(entry, dict) else None
        keys = entry.get("binding_keys") if isinstance(entry, dict) else None
        if (not isinstance(parts, list) or not isinstance(keys, list) or len(parts) != len(keys)
                or not all(isinstance(x, str) for x in (*parts, *keys))):
            raise DirectoryError(f"super_streams[{name!r}] needs 'partitions' and 'binding_keys',"
                                 " two lists of strings of the same length")
        supers[name] = SuperStreamEntry(tuple(parts), tuple(keys))
    zones_doc = doc.get("zones", {})
    if not isinstance(zones_doc, dict) or not all(
            isinstance(k, str) and k.isdigit() and isinstance(v, str) and v
            for k, v in zones_doc.items()):
        raise DirectoryError("'zones' must map member ids (\"0\", \"1\", ...) to zone names")
    return Directory(streams, supers, replicated, {int(k): v for k, v in zones_doc.items()})


def seal_changes(previous: Directory | None, current: Directory, vhost: str,
                 held: Iterable[str], here: Address) -> tuple[set[str], set[str]]:
    """Which of the streams ``held`` in ``vhost`` to seal and which to unseal, now that the
    directory went from ``previous`` (None: first load) to ``current``.

    A stream whose entry changed to name another broker was moved there: the operator copied
    it and switched the directory. This broker seals its copy (no more publishing; reads go
    on) so nothing is confirmed here after the switch, which the operator's last copy would
    miss. Only a change seals: a move's new stream is created while the directory still names
    the old broker, and must take the copy. A stream named here again (a move undone) is
    unsealed; an entry that disappears changes nothing.
    """
    seal: set[str] = set()
    unseal: set[str] = set()
    for name in held:
        if current.placement(vhost, name) is not None:
            continue  # replicated: its members' roles come from their epochs, not from moves
        now = current.leader(vhost, name)
        if now == here:
            unseal.add(name)
        elif now is not None and (previous is None or previous.leader(vhost, name) != now):
            seal.add(name)
    return seal, unseal


@dataclass
class MetadataAnswer:
    """A Metadata response's two lists, with broker references assigned once per response."""

    brokers: list[tuple[int, str, int]] = field(default_factory=list)
    #: name, code, leader reference, replica references
    streams: list[tuple[str, int, int, list[int]]] = field(default_factory=list)


def answer_metadata(names: Iterable[str], held: Callable[[str], bool], here: Address,
                    redirect: Callable[[str], Address | None],
                    placement: Callable[[str], Placement | None] = lambda name: None,
                    ) -> MetadataAnswer:
    """Metadata for ``names``: a replicated stream as its ``placement`` says (leader 0xFFFF
    while it is elected: clients retry); a held stream is led by this broker (``here``,
    reference 0); another is led by the broker ``redirect`` names, if any, else it does not
    exist.

    RabbitMQ clients look the leader up by reference in the response's broker list, so each
    address gets one reference, and only referenced brokers are listed. An address equal to
    ``here`` for a stream not held is a stale directory: the stream is not there.
    """
    answer = MetadataAnswer()
    refs: dict[Address, int] = {}

    def ref(address: Address) -> int:
        if address not in refs:
            refs[address] = len(refs)
            answer.brokers.append((refs[address], *address))
        return refs[address]

    for name in names:
        where = placement(name)
        if where is not None:
            leader = NO_LEADER if where.leader is None else ref(where.leader)
            answer.streams.append((name, Code.OK, leader, [ref(r) for r in where.replicas]))
        elif held(name):
            answer.streams.append((name, Code.OK, ref(here), []))
        else:
            address = redirect(name)
            if address is None or address == here:
                answer.streams.append((name, Code.STREAM_DOES_NOT_EXIST, NO_LEADER, []))
            else:
                answer.streams.append((name, Code.OK, ref(address), []))
    if not answer.brokers:
        ref(here)  # RabbitMQ always lists itself; clients do not mind an unused entry
    return answer


class DirectoryFile:
    """A directory file, re-read when its stat changes (looked at, at most once a second)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.clock = clock
        self.directory = EMPTY
        self._checked_at: float | None = None
        self._signature: tuple[int, int, int] | None = None
        self._problem: str | None = None

    def current(self, fresh: bool = False) -> Directory:
        """The directory; ``fresh``: the file's stat looked at now, whenever it was last."""
        now = self.clock()
        if fresh or self._checked_at is None or now - self._checked_at >= CHECK_INTERVAL_S:
            self._checked_at = now
            self._refresh()
        return self.directory

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)  # follows the symlinks a ConfigMap volume swaps atomically
            signature = (st.st_mtime_ns, st.st_ino, st.st_size)
            if signature == self._signature:
                return
            text = self.path.read_text()
            self.directory = parse(text)
        except (OSError, DirectoryError) as e:
            problem = f"stream directory {self.path}: {getattr(e, 'strerror', None) or e}"
            if problem != self._problem:  # once per distinct problem, not once a second
                log.warning("%s; keeping the last good one (%d streams)", problem,
                            len(self.directory.streams))
                self._problem = problem
            return
        self._signature = signature
        self._problem = None
        d = self.directory
        log.info("stream directory %s: %d streams (%d replicated), %d super streams", self.path,
                 len(d.streams) + len(d.replicated), len(d.replicated), len(d.super_streams))
