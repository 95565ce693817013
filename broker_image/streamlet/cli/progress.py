"""A progress line on a terminal's stderr for long work (nothing when stderr is not one)."""

from __future__ import annotations

import sys
import time

#: seconds between redraws
EVERY_S = 0.5


class Progress:
    def __init__(self, what: str, total: int | None = None) -> None:
        self.what = what
        self.total = total
        self.on = sys.stderr.isatty()
        self._start = self._shown = time.monotonic()

    def update(self, done: int) -> None:
        now = time.monotonic()
        if not self.on or now - self._shown < EVERY_S:
            return
        self._shown = now
        rate = done / max(now - self._start, 1e-9)
        of = f"/{self.total:,}" if self.total else ""
        bar = ""
        if self.total:
            filled = int(30 * done / self.total)
            bar = "[" + "#" * filled + "." * (30 - filled) + "] "
        sys.stderr.write(f"\r{bar}{self.what} {done:,}{of} ({rate:,.0f}/s)\x1b[K")
        sys.stderr.flush()

    def done(self) -> None:
        if self.on and self._shown != self._start:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
