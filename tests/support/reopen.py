"""Restarting an in-process broker (the fuzz tests' ``Broker``, never started: no socket) on the
same data directory, as a stop and a start do: its members' links stopped, every log flushed and
closed, then a new ``Broker`` recovering the streams, their replication state and super streams
from the files. What a fuzz wrote must not keep the next start from serving."""

from __future__ import annotations

import logging

import pytest

from streamlet.broker.server import Broker


def close(broker: Broker) -> None:
    broker.members.close()
    for vhost in broker.vhosts.values():
        vhost.close()


def reopen(broker: Broker, caplog: pytest.LogCaptureFixture) -> Broker:
    """``broker`` closed and a new one opened on its data: every stream recovered (none set
    aside, nothing logged as an error while recovering)."""
    close(broker)
    start = len(caplog.records)
    again = Broker(broker.config, broker.protocols)
    errors = [r.getMessage() for r in caplog.records[start:] if r.levelno >= logging.ERROR]
    assert not errors, f"the restart logged errors: {errors}"
    for name, vhost in again.vhosts.items():
        assert not vhost.streams.unreadable, (name, vhost.streams.unreadable)
        assert set(vhost.streams.streams) == set(broker.vhosts[name].streams.streams), \
            "a stream was lost in the restart"
    return again
