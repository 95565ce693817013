"""RepeatedError: the first error of a run, then at most one line per interval."""

from __future__ import annotations

import logging

import pytest

from streamlet.core.ratelog import RepeatedError


def test_a_run_of_errors_is_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    errors = RepeatedError(logging.getLogger("t"), interval=10, clock=lambda: now[0])
    errors.resolved("fine")  # nothing happened: nothing logged
    with caplog.at_level(logging.INFO, "t"):
        for _ in range(500):
            errors.error("write failed: %s", "ENOSPC")
            now[0] += 0.01  # 500 in 5 s
        now[0] += 6
        errors.error("write failed: %s", "ENOSPC")
        errors.error("write failed: %s", "ENOSPC")
        errors.resolved("writes succeed again")
        errors.resolved("writes succeed again")
        errors.error("write failed: %s", "EIO")  # a new run starts with a line of its own
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", "write failed: ENOSPC"),
        ("ERROR", "write failed: ENOSPC (499 more like this in the last 11 s)"),
        ("WARNING", "writes succeed again (after 502 like errors)"),
        ("ERROR", "write failed: EIO"),
    ]
