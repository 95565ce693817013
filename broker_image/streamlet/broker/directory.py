"""The stream directory: where streams this broker does not hold live, so it can answer for them.

Brokers are independent (one broker per stream). A directory file, written by the operator and
mounted into every pod, maps stream names to the advertised ``host:port`` of the broker holding
them, so a Metadata request to any broker names the right leader::

    {"streams": {"orders": "b-1.b-headless.ns.svc.cluster.local:5552",
                 "tenant-a/audit": "b-0.b-headless.ns.svc.cluster.local:5552"},
     "super_streams": {"invoices": {"partitions": ["invoices-0", "invoices-1"],
                                    "binding_keys": ["0", "1"]}}}

A key is the stream's name for the vhost ``/``, else ``<vhost>/<stream>``. A stream this broker
holds whose entry changes to name another broker has been moved there: it is sealed here
(``seal_changes``). The file is read again when it changes (its stat is checked at most once a
second, by a timer and when a request needs it); a file that cannot be
read or parsed is logged and the last good one kept. Everything but ``DirectoryFile`` is pure.
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

from ..protocol import Code
from ..protocol.constants import NO_LEADER

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
class Directory:
    streams: Mapping[str, Address] = field(default_factory=dict)
    super_streams: Mapping[str, SuperStreamEntry] = field(default_factory=dict)

    def leader(self, vhost: str, stream: str) -> Address | None:
        return self.streams.get(key(vhost, stream))

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
    for name, address in streams_doc.items():
        try:
            streams[name] = parse_address(address)
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
    return Directory(streams, supers)


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
    streams: list[tuple[str, int, int]] = field(default_factory=list)  # name, code, leader ref


def answer_metadata(names: Iterable[str], held: Callable[[str], bool], here: Address,
                    redirect: Callable[[str], Address | None]) -> MetadataAnswer:
    """Metadata for ``names``: a held stream is led by this broker (``here``, reference 0);
    another is led by the broker ``redirect`` names, if any, else it does not exist.

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
        if held(name):
            answer.streams.append((name, Code.OK, ref(here)))
            continue
        address = redirect(name)
        if address is None or address == here:
            answer.streams.append((name, Code.STREAM_DOES_NOT_EXIST, NO_LEADER))
        else:
            answer.streams.append((name, Code.OK, ref(address)))
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

    def current(self) -> Directory:
        now = self.clock()
        if self._checked_at is None or now - self._checked_at >= CHECK_INTERVAL_S:
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
        log.info("stream directory %s: %d streams, %d super streams", self.path,
                 len(self.directory.streams), len(self.directory.super_streams))
