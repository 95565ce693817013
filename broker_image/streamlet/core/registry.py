"""The registry of a virtual host's streams (``Streams``): open at start, create,
delete, lookup, and the unreadable set.

Streams are kept under ``<data_dir>/streams/<dir_name(name)>/``; a stream exists once its
``stream.json`` does. At start every one is recovered; one that cannot be read is set aside
(``unreadable``), never removed or re-created over, and the others are served. A create is
refused (``LimitReached``) past the broker's ``Limits``: streams, partitions, and the process's
file descriptors as the broker's ``Descriptors`` port reports them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

from ..storage.files import files
from .names import dir_name, valid_stream_name
from .ports import Clock, Descriptors
from .settings import StreamSettings
from .stats import LatencyHistogram
from .streams import Stream

log = logging.getLogger("streamlet.broker")


#: descriptors an open stream holds: its directory's lock and the segment it appends to (its
#: index is opened per write of its records; segments it reads are in the file cache)
FDS_PER_STREAM = 2
#: descriptors a create leaves free besides the file cache's room (listeners, a few
#: connections, a directory scan): connections past it are refused by the kernel, not streams
FD_RESERVE = 64


class StreamUnreadable(OSError):
    """A create of a stream whose directory was set aside at start (it could not be read)."""


class LimitReached(Exception):
    """A create would pass one of the broker's limits: answered 17 (precondition failed)."""


class Limits:
    """The broker's limits on streams, shared by the stream managers of all virtual hosts:
    ``max_streams`` (all vhosts, super stream partitions included; 0 = none),
    ``max_partitions`` (per super stream; 0 = none), and the process's descriptors: a create
    is refused while what is open, its streams' descriptors, the room left in the file cache
    and FD_RESERVE would pass the soft limit (RLIMIT_NOFILE). So the streams a broker holds always fit in its
    descriptors, and it restarts on them (a restart opens no more than were open)."""

    def __init__(self, max_streams: int = 0, max_partitions: int = 0,
                 descriptors: Descriptors | None = None) -> None:
        self.max_streams = max_streams
        self.max_partitions = max_partitions
        #: the process's descriptors (the broker's); None: not checked
        self.descriptors = descriptors
        self.managers: list[Streams] = []

    def stream_count(self) -> int:
        return sum(len(m.streams) for m in self.managers)

    def check(self, n: int, what: str) -> None:
        """Raise LimitReached (logged, with why) if ``n`` more streams do not fit."""
        why = self._why(n)
        if why is not None:
            log.warning("%s refused: %s", what, why)
            raise LimitReached(why)

    def _why(self, n: int) -> str | None:
        if self.max_streams:
            have = self.stream_count()
            if have + n > self.max_streams:
                return (f"{have} streams exist and limits.max_streams is {self.max_streams}"
                        f" ({n} more asked)")
        fds = self.descriptors.descriptors() if self.descriptors is not None else None
        if fds is None:  # unknown or unlimited: the other limits only
            return None
        used, soft = fds
        need = n * FDS_PER_STREAM + max(files.limit - len(files), 0) + FD_RESERVE
        if used + need > soft:
            return (f"{n} more stream(s) need {n * FDS_PER_STREAM} file descriptors; {used} of "
                    f"{soft} (RLIMIT_NOFILE) are open and the file cache may take "
                    f"{max(files.limit - len(files), 0)} more")
        return None


class Streams:
    """All streams of this broker, kept under ``<data_dir>/streams/<dir_name(name)>/``.
    Recovered at start; one that cannot be read (its ``stream.json``, its log) is set aside
    (``unreadable``) and the others are served."""

    def __init__(self, data_dir: Path, clock: Clock, fsync: str = "never",
                 limits: Limits | None = None) -> None:
        self.clock = clock
        self.root = data_dir / "streams"
        self.root.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.streams: dict[str, Stream] = {}
        #: told of each stream created (the broker applies its policies there)
        self.created: Callable[[Stream], None] | None = None
        self.limits = limits if limits is not None else Limits()
        self.limits.managers.append(self)
        #: publish-to-confirm of every stream here, one histogram: a deleted stream's samples
        #: stay counted (a broker-wide histogram never goes back)
        self.confirm_latency = LatencyHistogram()
        #: stream directories set aside at start because they could not be read: why, by
        #: directory. Not served (their names answer "not available"), never removed or
        #: re-created over: an operator looks at them (docs/reliability.md).
        self.unreadable: dict[Path, str] = {}
        for d in sorted(self.root.iterdir()):
            meta = d / "stream.json"
            if not d.is_dir():
                continue
            if not meta.is_file():  # a create or delete that did not finish: not a stream
                log.warning("removing %s: a stream directory without stream.json", d)
                _remove(d)
                continue
            try:
                stream = self._recover(d, meta)
            except Exception as e:  # noqa: BLE001 - one stream's damage never stops the start
                self.set_aside(d, f"{meta}: {type(e).__name__}: {e}")
                continue
            self.streams[stream.name] = stream
            log.info("recovered stream %s: offsets %d..%d", stream.name, stream.log.first_offset,
                     stream.log.next_offset)

    def _recover(self, d: Path, meta: Path) -> Stream:
        doc = json.loads(meta.read_bytes())
        if not isinstance(doc, dict) or not isinstance(doc.get("settings"), dict):
            raise ValueError("not a stream's settings")
        name = doc.get("name", unquote(d.name))
        if not isinstance(name, str) or valid_stream_name(name) is not None:
            raise ValueError(f"name {name!r}")
        return Stream(name, d, StreamSettings.from_json(doc["settings"]), self.fsync,
                      self.clock, self.confirm_latency)

    def set_aside(self, directory: Path, why: str, stream: Stream | None = None) -> None:
        """Stop serving the stream in ``directory`` (``stream``, when it was opened): its files
        stay as they are; the name answers "not available" until the broker starts with it
        readable again."""
        if stream is not None:
            self.streams.pop(stream.name, None)
            stream.log.close()
        self.unreadable[directory] = why
        log.error("stream directory %s set aside, not served: %s", directory, why)

    def unreadable_reason(self, name: str) -> str | None:
        """Why the stream called ``name`` is set aside; None when it is not."""
        return self.unreadable.get(self.root / dir_name(name)) if self.unreadable else None

    def get(self, name: str) -> Stream | None:
        return self.streams.get(name)

    def create(self, name: str, settings: StreamSettings) -> Stream:
        """Create the stream, or raise OSError leaving nothing behind (nothing it could remove),
        or LimitReached (before anything is done)."""
        self.limits.check(1, f"create {name!r}")
        d = self.root / dir_name(name)
        if d in self.unreadable:  # set aside: its files are kept, never replaced
            raise StreamUnreadable(f"create {name!r}: {d} was set aside at start: "
                                   f"{self.unreadable[d]}")
        if d.exists() and not _remove(d):  # leftover of a delete whose removal failed
            raise OSError(f"cannot remove the leftover directory {d}")
        stream = None
        try:
            stream = Stream(name, d, settings, self.fsync, self.clock, self.confirm_latency)
            tmp = d / "stream.json.tmp"
            tmp.write_text(json.dumps({"name": name, "settings": settings.to_json(),
                                       "created": int(self.clock.wall_time() * 1000)}))
            os.replace(tmp, d / "stream.json")  # the stream exists once this file does
        except OSError:
            if stream is not None:
                stream.log.close()
            _remove(d)
            raise
        self.streams[name] = stream
        if self.created is not None:
            self.created(stream)
        return stream

    def delete(self, name: str) -> Stream | None:
        """Forget the stream and remove its directory, before returning. ``stream.json`` goes
        first: from then on the stream does not exist, even if the rest cannot be removed (that
        is logged, and tried again at the next start or a create of the same name)."""
        stream = self.streams.pop(name, None)
        if stream is None:
            return None
        stream.mark_deleted()
        stream.log.close()
        try:
            (stream.directory / "stream.json").unlink(missing_ok=True)
        except OSError as e:
            log.error("stream %s deleted, but its stream.json could not be removed: %s", name, e)
        _remove(stream.directory)
        return stream

    def apply_retention(self) -> None:
        now = int(self.clock.wall_time() * 1000)
        for stream in self.streams.values():
            stream.log.apply_retention(now)

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()


def _remove(d: Path) -> bool:
    """Remove a directory tree; a failure is logged (with what is left), not raised: rmtree
    with an error handler goes on past what it cannot remove and reports each."""
    errors: list[str] = []

    def failed(_func: object, path: str, exc: object) -> None:  # onexc: the error; onerror: exc_info
        errors.append(f"{path}: {exc[1] if isinstance(exc, tuple) else exc}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(d, onexc=failed)
    else:
        shutil.rmtree(d, onerror=failed)
    if errors:
        log.error("could not remove %s (removed again at the next start): %s",
                  d, "; ".join(errors[:5]) or "still there")
        return False
    return True
