"""One process per data directory: an exclusive flock on a file in it (a broker's
``broker.lock``, the local cluster supervisor's ``cluster.lock``), held for the process's life
(the kernel drops it when the process dies, however it dies)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class AlreadyRunning(RuntimeError):
    """Another process holds the lock; ``pid`` is the one it wrote there, when readable."""

    def __init__(self, path: Path, pid: int | None) -> None:
        super().__init__(str(path))
        self.path = path
        self.pid = pid


class DirectoryLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write our pid in the file, or raise AlreadyRunning."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                text = os.read(fd, 32).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise AlreadyRunning(self.path, int(text) if text.isdigit() else None) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def holders(path: Path) -> set[int] | None:
    """The pids holding a flock on ``path``, from Linux's /proc/locks (empty when the file is
    missing); None where there is no /proc/locks to ask."""
    try:
        inode = os.stat(path).st_ino
    except FileNotFoundError:
        return set()
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    pids = set()
    for line in text.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 26253 fe:00:2179377 0 EOF"; a waiter's line has "->"
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rpartition(":")[2] == str(inode):
            pids.add(int(parts[4]))
    return pids
