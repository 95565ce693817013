"""This broker's policy set: kept in ``<data_dir>/policies.json`` (written whole, fsynced and
renamed before a change is answered), applied to every stream it holds (at start, on create,
on each change), and pushed to each of ``cluster.peers`` after a change and at start (empty
or not), retried until the peer answers; a peer's answer is its own set, merged back. So
every broker of a cluster converges on the newest version of each policy, whichever broker took the change and
whichever was down then (docs/operations.md, "Policies")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ...rabbitmq import Code
from ...rabbitmq.frames import replication as rf
from ..config.model import ConfigError
from ..directory import Address
from ..replication.peer import PeerLogin, open_peer
from .model import Policy, PolicySet, effective, effective_settings

if TYPE_CHECKING:
    from ...core.streams import Stream
    from ...core.vhosts import VirtualHost

log = logging.getLogger("streamlet.broker")

FILE = "policies.json"
#: a peer that did not answer is asked again after this, doubling up to RETRY_MAX_S
RETRY_S = 0.5
RETRY_MAX_S = 30.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class Policies:
    """The set, where it is kept, the vhosts it applies to, and the peers it is pushed to."""

    def __init__(self, data_dir: Path, vhosts: dict[str, VirtualHost], origin: str,
                 peers: tuple[Address, ...] = (), me: int | None = None,
                 login: PeerLogin | None = None) -> None:
        self.path = data_dir / FILE
        self.vhosts = vhosts
        self.origin = origin
        self.peers = tuple(a for i, a in enumerate(peers) if i != me) if login else ()
        self.login = login
        self.set = self._load()
        self._pushes: dict[Address, asyncio.Task[None]] = {}
        for vhost in vhosts.values():
            vhost.streams.created = self._created(vhost.name)
        self.apply()

    def _load(self) -> PolicySet:
        try:
            return PolicySet.from_json(json.loads(self.path.read_bytes()))
        except FileNotFoundError:
            return PolicySet()
        except (OSError, ValueError) as e:
            raise ConfigError(f"{self.path} cannot be read: {e} (move it away to start "
                              "without policies)") from e

    def _save(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "wb") as f:
            f.write(json.dumps(self.set.to_json(), indent=1).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    # --- applying -------------------------------------------------------------------------

    def effective(self, vhost: str, stream: str) -> Policy | None:
        return effective(self.set.live(vhost), vhost, stream)

    def apply_to(self, vhost: str, stream: Stream) -> None:
        stream.retune(effective_settings(stream.settings, self.effective(vhost, stream.name)))

    def apply(self, vhosts: Iterable[str] | None = None) -> None:
        for name in (self.vhosts if vhosts is None else vhosts):
            vhost = self.vhosts.get(name)
            for stream in list(vhost.streams.streams.values()) if vhost else ():
                try:
                    self.apply_to(name, stream)
                except OSError as e:  # retention runs again within a minute
                    log.error("stream %s: applying its policy failed: %s", stream.name, e)

    def _created(self, vhost: str) -> Callable[[Stream], None]:
        return lambda stream: self.apply_to(vhost, stream)

    # --- changes --------------------------------------------------------------------------

    def put(self, policy: Policy) -> bool:
        """A policy set here (True: it is new); saved and applied before returning."""
        new = self.set.get(*policy.key) is None
        self._take([self.set.change(policy, _now_ms(), self.origin)])
        return new

    def delete(self, vhost: str, name: str) -> bool:
        if self.set.get(vhost, name) is None:
            return False
        self._take([self.set.change(Policy(vhost, name, deleted=True), _now_ms(), self.origin)])
        return True

    def merge(self, entries: Iterable[Policy]) -> list[Policy]:
        """Entries from a peer or the operator: each newer than the one held is taken (one of
        version 0 is stamped as a change made here); saved and applied before returning."""
        local: list[Policy] = []
        remote: list[Policy] = []
        for p in entries:
            (local if p.version == 0 else remote).append(p)
        taken = self.set.merge(remote)
        for p in local:
            held = self.set.entries.get(p.key)
            if p.deleted and (held is None or held.deleted):
                continue
            if held is None or held.deleted != p.deleted or held.view() != p.view():
                taken.append(self.set.change(p, _now_ms(), self.origin))
        if taken:
            self._take(taken, push=bool(local))
        return taken

    def _take(self, taken: list[Policy], push: bool = True) -> None:
        self._save()
        for p in taken:
            log.info("policy %r in vhost %r %s (version %d from %s)", p.name, p.vhost,
                     "deleted" if p.deleted else f"set: {json.dumps(p.view())}", p.version,
                     p.origin)
        self.apply({p.vhost for p in taken})
        if push:
            self.push()

    # --- the peers --------------------------------------------------------------------------

    def start(self) -> None:
        """At start, a broker sends its set to its peers and takes theirs back: what it changed
        that they missed, and what they changed while it was down. It sends an empty set too,
        so a broker whose data directory is new (a replaced volume) learns the policies from
        the first peer that answers."""
        self.push()

    def push(self) -> None:
        """Send the whole set to every peer (a push still running is replaced: the new one
        carries all it would have). Needs a running event loop; without one, nothing is sent."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        for address in self.peers:
            old = self._pushes.pop(address, None)
            if old is not None:
                old.cancel()
            self._pushes[address] = asyncio.create_task(self._push(address))

    async def _push(self, address: Address) -> None:
        delay, failures = RETRY_S, 0
        while True:
            try:
                await self.sync(address)
                return
            except (OSError, ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
                failures += 1
                (log.warning if failures == 1 else log.debug)(
                    "policies: peer %s:%d not reached (%s); retrying until it is", *address, e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    async def sync(self, address: Address) -> None:
        """One exchange with a peer: this set sent, the peer's merged back."""
        assert self.login is not None
        body = json.dumps(self.set.to_json()).encode()
        async with open_peer(address, self.login) as peer:
            answer = await asyncio.wait_for(peer.request(
                rf.PolicySync(peer.next_corr(), body), rf.PolicySyncResponse), 30)
        if answer.code != Code.OK:
            raise RuntimeError(f"PolicySync answered code {answer.code}")
        self.merge_remote(answer.policies)

    def merge_remote(self, body: bytes) -> None:
        entries = PolicySet.from_json(json.loads(body)).entries.values()
        taken = self.set.merge(entries)
        if taken:
            self._take(taken, push=False)

    async def close(self) -> None:
        for task in self._pushes.values():
            task.cancel()
        for task in self._pushes.values():
            with contextlib.suppress(BaseException):
                await task
        self._pushes.clear()
