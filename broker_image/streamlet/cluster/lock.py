"""One supervisor per data directory: an exclusive flock on ``<data dir>/cluster.lock``, held
for the supervisor's life (the kernel drops it when the process dies, however it dies)."""

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
