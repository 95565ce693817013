"""Virtual hosts: each has its own streams, super streams and single-active-consumer groups.

A create refused raises ``SuperStreamRefused`` with a neutral ``Denial``; a protocol adapter
says it with its own code.

"/" keeps the original layout (``<data_dir>/streams/``, ``<data_dir>/superstreams.json``);
another virtual host lives under ``<data_dir>/vhosts/<dir_name(name)>/`` with the same layout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from .names import dir_name
from .ports import Clock
from .registry import LimitReached, Limits, Streams
from .sac import SacGroups
from .settings import StreamSettings
from .streams import Stream
from .superstreams import Denial, SuperStream, SuperStreamRefused, SuperStreams, validate

log = logging.getLogger("streamlet.broker")


def vhost_root(data_dir: Path, name: str) -> Path:
    if name == "/":
        return data_dir
    return data_dir / "vhosts" / dir_name(name)


#: The settings a partition is made with from its super stream's Create arguments (the
#: protocol's, which the core does not parse); raises ValueError for arguments it refuses.
PartitionSettings = Callable[[Mapping[str, str]], StreamSettings]


def _defaults(arguments: Mapping[str, str]) -> StreamSettings:
    return StreamSettings()


class VirtualHost:
    def __init__(self, name: str, data_dir: Path, fsync: str, limits: Limits, clock: Clock,
                 partition_settings: PartitionSettings = _defaults) -> None:
        self.name = name
        self.partition_settings = partition_settings
        self.root = vhost_root(data_dir, name)
        self.root.mkdir(parents=True, exist_ok=True)
        self.streams = Streams(self.root, clock, fsync, limits)
        self.limits = self.streams.limits
        self.superstreams = SuperStreams(self.root / "superstreams.json")
        self.sac = SacGroups()
        self._repair_super_streams()

    def _repair_super_streams(self) -> None:
        """A partition a super stream names but that is not there (its directory removed by
        hand, or a record from an older streamlet that wrote it before the partitions): create
        it, with the settings of the arguments the super stream was created with. One that
        cannot be created is logged and left out; it never stops the start."""
        for ss in self.superstreams.items.values():
            if _replicated(dict(ss.arguments)):
                continue  # its partitions live on their members, not necessarily here
            for p in ss.partitions:
                if self.streams.get(p) is None:
                    log.warning("super stream %s: re-creating missing partition %s", ss.name, p)
                    try:
                        settings = self.partition_settings(dict(ss.arguments))
                    except ValueError as e:  # accepted once, refused now (a changed rule)
                        log.warning("super stream %s: arguments %s no longer accepted (%s): "
                                    "partition %s made with the defaults", ss.name,
                                    dict(ss.arguments), e, p)
                        settings = StreamSettings()
                    try:
                        self.streams.create(p, settings)
                    except (OSError, LimitReached) as e:
                        log.error("super stream %s: cannot create partition %r: %s",
                                  ss.name, p, e)

    def check_super_stream(self, name: str, partitions: list[str],
                           binding_keys: list[str]) -> None:
        """Raise SuperStreamRefused if this super stream cannot be created here."""
        why = validate(name, partitions, binding_keys)
        if why is not None:
            raise SuperStreamRefused(Denial.INVALID, why)
        if self.superstreams.get(name) is not None:
            raise SuperStreamRefused(Denial.EXISTS, f"super stream {name} exists")
        if self.limits.max_partitions and len(partitions) > self.limits.max_partitions:
            raise SuperStreamRefused(Denial.LIMIT, f"{len(partitions)} partitions: "
                                     f"limits.max_partitions is {self.limits.max_partitions}")
        clash = [p for p in partitions if self.streams.get(p) is not None]
        if clash:
            raise SuperStreamRefused(Denial.EXISTS, f"stream(s) {', '.join(clash)} exist")

    def create_super_stream(self, name: str, partitions: list[str], binding_keys: list[str],
                            arguments: dict[str, str], settings: StreamSettings) -> None:
        """Create the partitions, then the record; raise SuperStreamRefused (nothing done, or
        all of it undone)."""
        self.check_super_stream(name, partitions, binding_keys)
        try:
            self.limits.check(len(partitions), f"create super stream {name!r}")
        except LimitReached as e:
            raise SuperStreamRefused(Denial.LIMIT, str(e)) from e
        # the partitions first, then the record: a record never names what does not exist (a
        # crash in between leaves plain streams, which a retry reports as existing)
        created: list[str] = []
        try:
            for p in partitions:
                self.streams.create(p, settings)
                created.append(p)
            self.record_super_stream(name, partitions, binding_keys, arguments)
        except (OSError, LimitReached) as e:
            log.error("create super stream %r failed: %s", name, e)
            self.superstreams.items.pop(name, None)
            for p in created:
                self.streams.delete(p)
            reason = Denial.LIMIT if isinstance(e, LimitReached) else Denial.FAILED
            raise SuperStreamRefused(reason, str(e)) from e

    def record_super_stream(self, name: str, partitions: list[str], binding_keys: list[str],
                            arguments: dict[str, str]) -> None:
        """The super stream's record, its partitions made already (a replicated super stream's
        partitions are made on their members, not all here)."""
        self.superstreams.add(SuperStream(name, tuple(partitions), tuple(binding_keys),
                                          tuple(sorted(arguments.items()))))

    def delete_super_stream(self, name: str) -> list[Stream] | None:
        """Forget the super stream and delete its partitions; None if there is no such one."""
        ss = self.superstreams.remove(name)
        if ss is None:
            return None
        deleted = []
        for p in ss.partitions:
            stream = self.streams.delete(p)
            if stream is not None:
                deleted.append(stream)
        return deleted

    def close(self) -> None:
        self.streams.close()


def _replicated(arguments: dict[str, str]) -> bool:
    """Whether a super stream's partitions were made with more than one copy (the protocol's
    ``initial-cluster-size``, which the record keeps with its other arguments)."""
    try:
        return int(arguments.get("initial-cluster-size", "1")) > 1
    except ValueError:
        return False
