"""Logging an error that repeats: the first of a run, then at most one line per interval."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RepeatedError:
    """One kind of error (a stream's refused writes, say). ``error`` logs the first occurrence,
    then at most one line per ``interval`` seconds, saying how many were not logged since the
    last line; ``resolved`` logs once that it stopped, with how many there were in all. A full
    disk refusing every flush of a busy stream so costs one line per 10 s, not hundreds."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self.total = 0  # occurrences since the last resolved()
        self._unlogged = 0
        self._logged_at = 0.0

    def error(self, msg: str, *args: object) -> None:
        now = self.clock()
        self.total += 1
        if self.total > 1 and now - self._logged_at < self.interval:
            self._unlogged += 1
            return
        if self._unlogged:
            msg += " (%d more like this in the last %.0f s)"
            args = (*args, self._unlogged, now - self._logged_at)
        self.logger.error(msg, *args)
        self._unlogged = 0
        self._logged_at = now

    def resolved(self, msg: str, *args: object) -> None:
        """The error stopped: log ``msg`` and the count, once, if there was any."""
        if not self.total:
            return
        self.logger.warning(msg + " (after %d like errors)", *args, self.total)  # noqa: G003 - a template
        self.total = self._unlogged = 0
