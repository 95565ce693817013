"""The broker's timer loop (streamlet.broker.periodic.every): it calls the check again and
again, logs a failing check and goes on, and stops when cancelled."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streamlet.broker.periodic import every
from tests.support.waiting import eventually


async def test_every_runs_survives_a_failure_and_stops_when_cancelled(
        caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    def check() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("boom")

    log = logging.getLogger("streamlet.test.periodic")
    with caplog.at_level(logging.ERROR, logger=log.name):
        task = asyncio.create_task(every(0.001, check, log, "test check"))
        await eventually(lambda: calls >= 4, 10, "four checks, one past the failure")
    failures = [r for r in caplog.records if r.name == log.name]
    assert [r.getMessage() for r in failures] == ["test check failed"]
    assert failures[0].exc_info is not None and isinstance(failures[0].exc_info[1], RuntimeError)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stopped_at = calls
    await asyncio.sleep(0)  # the loop gets a turn: a stopped timer calls nothing more
    assert task.cancelled() and calls == stopped_at
