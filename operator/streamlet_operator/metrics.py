"""Prometheus metrics of the operator: its reconcilers (how many, how many failed, how long they
took), and what its replication driver did (elections, member changes, replacements)."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import Counter, Histogram, start_http_server

RECONCILIATIONS = Counter(
    "streamlet_operator_reconciliations_total", "Reconciliations run", ["kind", "handler"])
FAILURES = Counter(
    "streamlet_operator_reconciliation_failures_total", "Reconciliations that raised",
    ["kind", "handler"])
DURATION = Histogram(
    "streamlet_operator_reconciliation_duration_seconds", "Time spent in a reconciliation",
    ["kind", "handler"], buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
DRIFT_REPAIRS = Counter(
    "streamlet_operator_drift_repairs_total", "Streams found missing on their broker and re-created",
    ["namespace"])

MOVES = Counter(
    "streamlet_operator_stream_moves_total", "Streams moved off broker pods being removed",
    ["namespace"])

ELECTIONS = Counter(
    "streamlet_operator_elections_total",
    "Elections of a replicated stream's leader the operator's driver recorded (reason: why that"
    " member won, or StreamGone)", ["namespace", "broker", "reason"])
MEMBER_REPLACEMENTS = Counter(
    "streamlet_operator_member_replacements_total",
    "Lost members of replicated streams replaced by a new member", ["namespace", "broker"])
MEMBERSHIP_CHANGES = Counter(
    "streamlet_operator_membership_changes_total",
    "Member set changes of replicated streams completed (kind: add or remove)",
    ["namespace", "broker", "kind"])

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def instrumented(kind: str, handler: str) -> Callable[[F], F]:
    """Count and time a kopf handler; kopf's own retries count as new reconciliations."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> Any:
            RECONCILIATIONS.labels(kind, handler).inc()
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            except BaseException:
                FAILURES.labels(kind, handler).inc()
                raise
            finally:
                DURATION.labels(kind, handler).observe(time.perf_counter() - started)

        return run  # type: ignore[return-value]

    return wrap


def serve(port: int) -> None:
    """Expose /metrics on ``port`` (0: do not serve)."""
    if port:
        start_http_server(port)
