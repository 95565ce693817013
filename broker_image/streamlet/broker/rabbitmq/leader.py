"""Requests only a replicated stream's leader answers (StoreOffset, QueryOffset,
QueryPublisherSequence), taken on any member's connection: answered here by the leader (or for
a stream with one copy), passed to the leader by a follower (broker.replication.forward)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...core.streams import Stream
from ...rabbitmq import Code
from ...rabbitmq import frames as f
from ..directory import Address
from ..replication.forward import FORWARDED
from ..replication.members import Refused
from .state import ConnectionState

log = logging.getLogger("streamlet.broker")


def route(conn: ConnectionState, stream: Stream) -> Address | Code | None:
    """None: answer here; an address: the leader's, to forward to; STREAM_NOT_AVAILABLE: no
    leader is known (a fenced member), or a forwarded request reached a follower."""
    try:
        leader = conn.broker.members.leader_of(stream)
    except Refused:
        return Code.STREAM_NOT_AVAILABLE
    if leader is not None and conn.client_properties.get("connection_name") == FORWARDED:
        return Code.STREAM_NOT_AVAILABLE  # never passed on twice
    return leader


def forward(conn: ConnectionState, leader: Address, cmd: f.Command,
            answer: Callable[[Any], f.Command] | None = None,
            kind: type[f.Command] | None = None) -> None:
    """Pass ``cmd`` to the leader; send ``answer(its response)`` (None when it failed) back."""
    assert conn.vhost is not None
    vhost, forwarder = conn.vhost.name, conn.broker.forwarder

    async def run() -> None:
        try:
            response = await forwarder.request(leader, vhost, cmd, kind)
        except Exception as e:  # the leader is gone: the client retries on 6
            log.info("connection %s: %s for the leader %s:%d failed: %s", conn.peer,
                     type(cmd).__name__, *leader, e)
            response = None
        if answer is not None:
            conn.send(answer(response))

    conn.spawn(run(), f"{type(cmd).__name__} for the leader")
