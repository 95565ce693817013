"""Streams: each owns its log, its publishers' deduplication state and its subscriptions.

Publishes arriving in one event-loop iteration, from any connection, coalesce into one chunk:
``publish`` queues, the flush runs with ``call_soon``. A confirm goes out only after the
chunk's ``os.write`` returned, so a killed broker loses nothing it confirmed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from ..protocol import Code
from ..protocol.publish import PublishBatch
from ..storage import LogConfig, StreamLog
from .arguments import StreamSettings
from .filtering import chunk_bloom

if TYPE_CHECKING:
    from .connection import Connection
    from .subscription import Subscription

log = logging.getLogger("streamlet.broker")

#: Flush early past these, so a chunk stays a sensible unit of delivery (NumEntries is a u16).
CHUNK_MAX_BYTES = 4 << 20
CHUNK_MAX_ENTRIES = 60_000


class Publisher:
    __slots__ = ("id", "reference", "stream", "conn")

    def __init__(self, pid: int, reference: str | None, stream: Stream, conn: Connection) -> None:
        self.id = pid
        self.reference = reference
        self.stream = stream
        self.conn = conn


class Stream:
    def __init__(self, name: str, directory: Path, settings: StreamSettings, fsync: str) -> None:
        self.name = name
        self.directory = directory
        self.settings = settings
        self.log = StreamLog(directory, LogConfig(
            max_segment_bytes=settings.max_segment_size_bytes,
            max_bytes=settings.max_length_bytes,
            max_age_ms=settings.max_age_ms,
            fsync=fsync,
            filter_size=settings.filter_size,
        ))
        self.publishers: set[Publisher] = set()
        self.subscriptions: set[Subscription] = set()
        #: connections that asked Metadata about this stream: told when it goes away
        self.watchers: set[Connection] = set()
        #: last publishing id accepted per reference, pending writes included
        self.sequences: dict[str, int] = dict(self.log.writer_sequences)
        self._entries: list[memoryview | bytes] = []
        self._records = 0
        self._bytes = 0
        self._confirms: dict[tuple[Connection, int], list[int]] = defaultdict(list)
        self._dirty_refs: dict[str, int] = {}
        #: filter values of the pending chunk (None: an entry without one), for its bloom
        self._filter_values: set[str | None] = set()
        self._scheduled = False
        self.deleted = False

    # --- publishing ---------------------------------------------------------------------------

    def publish(self, publisher: Publisher, batch: PublishBatch) -> None:
        ids = batch.publishing_ids
        entries = batch.entries
        records = batch.records
        ref = publisher.reference
        if ref is not None and ids:
            last = self.sequences.get(ref, 0)
            if ids[0] <= last or any(b <= a for a, b in zip(ids, ids[1:], strict=False)):
                ids, entries, records, dup = _deduplicate(ids, entries, records, last)
                if dup:  # already stored: confirm at once, store nothing
                    publisher.conn.send_confirm(publisher.id, dup)
            if ids:
                self.sequences[ref] = self._dirty_refs[ref] = max(last, ids[-1])
        if not ids:
            return
        if batch.filter_values is None:
            self._filter_values.add(None)
        else:
            self._filter_values.update(batch.filter_values)
        self._entries.extend(entries)
        if entries is batch.entries:
            self._records += batch.total_records
            self._bytes += batch.total_bytes
        else:
            self._records += sum(records)
            self._bytes += sum(len(e) for e in entries)
        self._confirms[(publisher.conn, publisher.id)].extend(ids)
        if self._bytes >= CHUNK_MAX_BYTES or len(self._entries) >= CHUNK_MAX_ENTRIES:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if not self._entries or self.deleted:
            return
        entries, confirms, refs = self._entries, self._confirms, self._dirty_refs
        records = self._records
        self._entries, self._records, self._bytes = [], 0, 0
        self._confirms, self._dirty_refs = defaultdict(list), {}
        bloom = chunk_bloom(self._filter_values, self.settings.filter_size)
        self._filter_values = set()
        try:
            self.log.append(b"".join(entries), len(entries), records, writer_sequences=refs or None,
                            bloom=bloom)
        except OSError as e:
            log.error("stream %s: write failed: %s", self.name, e)
            self.sequences.update({r: self.log.writer_sequences.get(r, 0) for r in refs})
            for (conn, pid), ids in confirms.items():
                conn.send_publish_error(pid, ids, Code.INTERNAL_ERROR)
            return
        for (conn, pid), ids in confirms.items():
            conn.send_confirm(pid, ids)
        for sub in list(self.subscriptions):
            sub.pump()

    # --- consumer offsets ----------------------------------------------------------------------

    def store_offset(self, reference: str, offset: int) -> None:
        self.flush()  # keep the log's order: tracking after the data it refers to
        self.log.store_offset(reference, offset)

    def stats(self) -> dict[str, int]:
        lg = self.log
        return {
            "first_chunk_id": lg.first_chunk_id,
            "committed_chunk_id": lg.committed_chunk_id,
            "last_chunk_id": lg.last_chunk_id,
        }

    def holders(self) -> set[Connection]:
        return {p.conn for p in self.publishers} | {s.conn for s in self.subscriptions} | self.watchers

    def close(self) -> None:
        self.flush()
        self.log.close()


def _deduplicate(
    ids: list[int], entries: list[memoryview], records: list[int], last: int
) -> tuple[list[int], list[memoryview], list[int], list[int]]:
    """Keep messages whose id is above every id seen so far; return (kept..., duplicates)."""
    keep_ids: list[int] = []
    keep_entries: list[memoryview] = []
    keep_records: list[int] = []
    dup: list[int] = []
    for pid, entry, n in zip(ids, entries, records, strict=True):
        if pid > last:
            keep_ids.append(pid)
            keep_entries.append(entry)
            keep_records.append(n)
            last = pid
        else:
            dup.append(pid)
    return keep_ids, keep_entries, keep_records, dup


def _dir_name(name: str) -> str:
    encoded = quote(name, safe="")
    return "%2E" + encoded[1:] if encoded.startswith(".") else encoded


class StreamManager:
    """All streams of this broker, kept under ``<data_dir>/streams/<quoted name>/``."""

    def __init__(self, data_dir: Path, fsync: str = "never") -> None:
        self.root = data_dir / "streams"
        self.root.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.streams: dict[str, Stream] = {}
        for d in sorted(self.root.iterdir()):
            meta = d / "stream.json"
            if not meta.is_file():
                continue  # a create or delete that did not finish
            doc = json.loads(meta.read_text())
            name = doc.get("name", unquote(d.name))
            self.streams[name] = Stream(name, d, StreamSettings.from_json(doc["settings"]), fsync)
            log.info("recovered stream %s: offsets %d..%d", name,
                     self.streams[name].log.first_offset, self.streams[name].log.next_offset)

    def get(self, name: str) -> Stream | None:
        return self.streams.get(name)

    def create(self, name: str, settings: StreamSettings) -> Stream:
        d = self.root / _dir_name(name)
        if d.exists():  # leftover of an interrupted delete
            shutil.rmtree(d)
        stream = Stream(name, d, settings, self.fsync)
        tmp = d / "stream.json.tmp"
        tmp.write_text(json.dumps({"name": name, "settings": settings.to_json(),
                                   "created": int(time.time() * 1000)}))
        os.replace(tmp, d / "stream.json")  # the stream exists once this file does
        self.streams[name] = stream
        return stream

    def delete(self, name: str) -> Stream | None:
        stream = self.streams.pop(name, None)
        if stream is None:
            return None
        stream.deleted = True
        stream.log.close()
        (stream.directory / "stream.json").unlink(missing_ok=True)
        shutil.rmtree(stream.directory, ignore_errors=True)
        return stream

    def apply_retention(self) -> None:
        now = int(time.time() * 1000)
        for stream in self.streams.values():
            stream.log.apply_retention(now)

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()
