"""Requests a follower passes to its leader: StoreOffset, QueryOffset and
QueryPublisherSequence, which RabbitMQ clients send on whichever connection they have (rstream:
its locator connection), while only the leader's log may take a tracking chunk and only the
leader knows the last sequence. One connection per leader and virtual host, kept open, one
request at a time on it (FIFO, so a consumer's StoreOffsets keep their order). A forwarded
request is never forwarded again (its connection names itself ``FORWARDED``): two members that
disagree about the leader answer 6 instead of passing it back and forth."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TypeVar

from ...rabbitmq import frames as f
from ..directory import Address
from .peer import Peer, PeerLogin, open_peer

log = logging.getLogger("streamlet.broker")

#: The connection_name a forwarding connection gives, so the leader does not forward again.
FORWARDED = "streamlet forward"
TIMEOUT_S = 10.0

_T = TypeVar("_T", bound=f.Command)


class _Link:
    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.stack: contextlib.AsyncExitStack | None = None
        self.peer: Peer | None = None


class Forwarder:
    def __init__(self, credentials: PeerLogin) -> None:
        self.credentials = credentials
        self._links: dict[tuple[Address, str], _Link] = {}

    async def request(self, leader: Address, vhost: str, cmd: f.Command,
                      kind: type[_T] | None) -> _T | None:
        """``cmd`` (its correlation id, if any, is replaced) answered by the leader with a
        ``kind``; None for a command without an answer. Raises on a broken link (closed)."""
        link = self._links.setdefault((leader, vhost), _Link())
        async with link.lock:
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    peer = await self._open(link, leader, vhost)
                    if hasattr(cmd, "correlation_id"):
                        cmd.correlation_id = peer.next_corr()
                    if kind is None:
                        peer.send(cmd)
                        return None
                    return await peer.request(cmd, kind)
            except BaseException:
                await self._drop(link)
                raise

    async def _open(self, link: _Link, leader: Address, vhost: str) -> Peer:
        if link.peer is None:
            stack = contextlib.AsyncExitStack()
            link.peer = await stack.enter_async_context(
                open_peer(leader, self.credentials, FORWARDED, vhost))
            link.stack = stack
        return link.peer

    async def _drop(self, link: _Link) -> None:
        stack, link.stack, link.peer = link.stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    async def close(self) -> None:
        for link in self._links.values():
            await self._drop(link)
        self._links.clear()
