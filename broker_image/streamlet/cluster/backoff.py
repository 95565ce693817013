"""When to restart a node that exited: the kubelet's crash-loop backoff, as a pure function.

A node that exits is restarted after a delay that starts at ``initial`` and doubles each time
it exits again soon after starting, up to ``maximum``; once a run has lasted ``reset_after``
seconds, the next exit starts over at ``initial``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackoffPolicy:
    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 10.0
    #: a run at least this long counts as healthy: the next delay is ``initial`` again
    reset_after: float = 30.0


DEFAULT_POLICY = BackoffPolicy()


def next_delay(previous: float | None, ran_for: float,
               policy: BackoffPolicy = DEFAULT_POLICY) -> float:
    """Seconds to wait before restarting a node whose process ran ``ran_for`` seconds, given
    the delay used before the restart that started it (``None`` when it is the first run)."""
    if previous is None or ran_for >= policy.reset_after:
        return policy.initial
    return min(previous * policy.factor, policy.maximum)
