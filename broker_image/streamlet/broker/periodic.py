"""A timer loop that outlives a failing check: the broker's periodic checks run on it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable


async def every(interval: float, check: Callable[[], object], log: logging.Logger,
                what: str) -> None:
    """Sleep ``interval`` seconds, call ``check``, again and again until cancelled. An
    exception from ``check`` is logged on ``log`` ("<what> failed", with its traceback) and
    the next tick tries again."""
    while True:
        await asyncio.sleep(interval)
        try:
            check()
        except Exception:  # never let the timer die: the next tick tries again
            log.exception("%s failed", what)
