"""The process's budget of read-only segment file descriptors.

A segment that is read (not the one a stream appends to) keeps its file open for the next
read, in one process-wide least-recently-used set: past ``limit`` files, the least recently
used is closed (and opened again on its next read). ``open_file`` is ``os.open`` that, when
the process is out of descriptors (EMFILE/ENFILE), closes cached files and tries once more, so
recovery and reads never fail while the cache holds descriptors it can give back.
"""

from __future__ import annotations

import errno
import os
from collections import OrderedDict
from typing import Protocol

DEFAULT_LIMIT = 1024
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)


class Cached(Protocol):
    def drop_fd(self) -> None:
        """Close the cached descriptor (the cache has already forgotten it)."""


class FileCache:
    """Least recently used open files, at most ``limit`` of them."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._lru: OrderedDict[Cached, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def set_limit(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the file cache needs room for at least one file")
        self.limit = limit
        self._shrink(limit)

    def add(self, owner: Cached) -> None:
        """``owner`` just opened its file: it is the most recently used."""
        self._lru[owner] = None
        self._lru.move_to_end(owner)
        self._shrink(self.limit)

    def touch(self, owner: Cached) -> None:
        self._lru.move_to_end(owner)

    def forget(self, owner: Cached) -> None:
        self._lru.pop(owner, None)

    def _shrink(self, keep: int) -> None:
        while len(self._lru) > keep:
            owner, _ = self._lru.popitem(last=False)
            owner.drop_fd()

    def release(self) -> bool:
        """Close half of the cached files (at least one); False when there was none."""
        if not self._lru:
            return False
        self._shrink(len(self._lru) // 2)
        return True

    def open(self, path: os.PathLike[str] | str, flags: int, mode: int = 0o644) -> int:
        """``os.open``, closing cached files and retrying while the process is out of fds."""
        while True:
            try:
                return os.open(path, flags, mode)
            except OSError as e:
                if e.errno not in _OUT_OF_FDS or not self.release():
                    raise


#: the one cache of this process (the broker sets its limit from storage.max_open_files)
files = FileCache()


def open_file(path: os.PathLike[str] | str, flags: int, mode: int = 0o644) -> int:
    return files.open(path, flags, mode)
