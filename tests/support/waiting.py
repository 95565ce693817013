"""Waiting for a condition in async tests: bounded polling, never a hang."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(check: Callable[[], Any | Awaitable[Any]], timeout: float = 20.0,
                     what: str = "condition") -> Any:
    """Poll ``check`` (plain or async) until it returns something truthy, and return that;
    fail with ``what`` and the last value seen after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout} s; last seen: {last!r}")
