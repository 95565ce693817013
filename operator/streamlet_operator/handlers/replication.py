"""The placement driver's loop: one kopf daemon per Broker runs driver.Driver's ticks."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from ..constants import GROUP, VERSION
from ..driver import Driver
from ..settings import SETTINGS
from .common import runtime_of

log = logging.getLogger(__name__)


@kopf.daemon(GROUP, VERSION, "brokers", cancellation_timeout=10)
async def placement_driver(*, name: str, namespace: str | None, memo: Any,
                           stopped: kopf.DaemonStopped, **_: Any) -> None:
    """Elect, re-assign and observe the Broker's replicated Streams until it goes."""
    driver = Driver(runtime_of(memo), namespace or "default", name)
    while not stopped:
        try:
            await driver.tick()
        except Exception:  # the API server or a pod failing this tick: the next one retries
            log.exception("%s/%s: placement driver tick failed", namespace, name)
        await stopped.wait(SETTINGS.replication_interval)
