"""The local cluster's placement driver: it elects replicated streams' leaders by the pure rule
(streamlet.replication.election), carries the decision out with the brokers' private Fence and
Assign (streamlet.driver.elector), and writes the stream directory every node answers Metadata from.

A leader is replaced only when it and the followers still in contact with it are no longer a
quorum; an epoch is reserved in ``driver.json`` before any Fence, so none is used twice; without
a fenced majority nothing is elected. It also carries out ``cluster elect --force`` and
``cluster transfer`` requests.
Mechanism: docs/replication.md#the-local-placement-driver-streamlet-cluster-up.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..driver.elector import Members, run_election
from ..rabbitmq.constants import Role
from ..replication.election import Decision, elect, transfer, transfer_ready
from ..replication.liveness import Contact, leader_lost
from ..replication.model import NO_LEADER, Tail
from . import requests

if TYPE_CHECKING:
    from .supervisor import Supervisor

log = logging.getLogger("streamlet.cluster")

RECORD = "driver.json"
TICK_S = 0.5
#: A leader's broker that misses this many probes in a row (elector.PROBE_TIMEOUT_S each,
#: 1.5-4.5 s) is suspected: replaced as if it had exited if its followers lost it too.
SUSPECT_AFTER = 3
#: A planned transfer waits this long for the target to hold the sealed leader's whole log
#: (it is behind by what was in flight: usually milliseconds), polling every TRANSFER_POLL_S.
TRANSFER_WAIT_S = 10.0
TRANSFER_POLL_S = 0.05
#: A follower that has not heard from its leader for this long no longer vouches for it (an
#: idle leader sends something every 0.5 s: broker.replication.leader.HEARTBEAT_S).
CONTACT_TIMEOUT_S = 3.0


@dataclass
class StreamRecord:
    """What the driver decided for one stream: the epoch, the leader (-1: none), the members,
    each member's broker pid when it was assigned (a new pid: it lost its role), and whether
    the election was unclean."""

    epoch: int
    leader: int
    members: list[int]
    pids: dict[str, int] = field(default_factory=dict)
    #: this epoch's leader was elected without a majority (``cluster elect --force``): it may
    #: lack messages that were confirmed
    unclean: bool = False


class LocalDriver:
    def __init__(self, data_dir: Path, host: str, ports: list[int],
                 credentials: tuple[str, str] = ("guest", "guest"),
                 peer_ports: list[int] | None = None) -> None:
        """``ports``: where the driver reaches each node; ``peer_ports``: where nodes and clients
        reach each other (the directory's addresses, a follower's leader), when they differ."""
        self.data_dir = data_dir
        self.host = host
        self.ports = peer_ports or ports
        self.brokers = Members(lambda m: (host, ports[m]), credentials,
                               peer_address=lambda m: (host, self.ports[m]))
        self.records: dict[str, StreamRecord] = self._load()
        self._alive: Mapping[int, int | None] = {}
        #: probes of a leader's broker missed in a row, by node
        self.misses: dict[int, int] = {}
        self._kept: set[str] = set()  # streams whose unanswering leader its followers vouch for
        self._published_supers: dict[str, Any] | None = None

    # --- the loop ------------------------------------------------------------------------------

    async def run(self, supervisor: Supervisor) -> None:
        while True:
            try:
                await self.tick({n.index: n.pid for n in supervisor.state.nodes if n.alive})
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the driver die: the next tick tries again
                log.exception("placement driver tick failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(supervisor.changed(), TICK_S)

    async def tick(self, alive: Mapping[int, int | None]) -> None:
        """``alive``: node index -> broker pid, for the nodes running now."""
        self._alive = alive
        names = self._discover()
        if self._super_streams() != self._published_supers:
            self._publish_directory()
        asked = {(r.kind, r.stream): r for r in requests.read(self.data_dir)}
        for r in asked.values():
            if r.stream not in self.records:
                log.warning("request to %s %s: no such replicated stream", r.kind, r.stream)
                requests.done(self.data_dir, r, f"no replicated stream {r.stream}")
        suspects = await self._suspects({self.records[n].leader for n in names} - {NO_LEADER})
        for name in names:
            record = self.records[name]
            leader_pid = record.pids.get(str(record.leader))
            forced = asked.get((requests.ELECT, name))
            if record.leader not in suspects:
                self._kept.discard(name)  # answering again: a new suspicion is logged anew
            if (record.leader == NO_LEADER or alive.get(record.leader) != leader_pid
                    or (record.leader in suspects and await self._lost(name, record))):
                await self._elect(name, record, alive,
                                  force=forced is not None and forced.force)
                if forced is not None:
                    requests.done(self.data_dir, forced, None if record.leader != NO_LEADER
                                  else "no member answered the election")
                continue
            if forced is not None:
                log.info("stream %s: member %d leads: no election to force", name, record.leader)
                requests.done(self.data_dir, forced,
                              f"member {record.leader} leads: no election to force")
            moving = asked.get((requests.TRANSFER, name))
            if moving is not None:  # waits while the stream has no leader
                why_not = await self._transfer(name, record, moving.to, alive)
                requests.done(self.data_dir, moving, why_not)
                continue
            restarted = [m for m in record.members if m != record.leader and m in alive
                         and record.pids.get(str(m)) != alive[m]]
            for m in restarted:  # back fenced, or not reached when elected: its role now
                if await self._assign(name, record, m, Role.FOLLOWER):
                    record.pids[str(m)] = alive[m] or 0
                    self._save()

    async def _suspects(self, leaders: set[int]) -> set[int]:
        """The leaders whose broker did not answer a login for SUSPECT_AFTER ticks in a row (a
        process that runs but does not work, or a path to it that fails): their followers are
        asked whether they lost it too. Followers are not probed: a stuck follower costs no
        availability."""
        results = await asyncio.gather(*(self.brokers.probe(n) for n in sorted(leaders)))
        # a node that leads nothing now starts from no misses when it leads again
        self.misses = {node: 0 if ok else self.misses.get(node, 0) + 1
                       for node, ok in zip(sorted(leaders), results, strict=True)}
        return {n for n, missed in self.misses.items() if missed >= SUSPECT_AFTER}

    async def _lost(self, name: str, record: StreamRecord) -> bool:
        """Whether the suspected leader of ``name`` is lost: too few of its followers heard
        from it lately to make a quorum with it (replication.liveness)."""
        followers = [m for m in record.members if m != record.leader]
        answers = await asyncio.gather(*(self.brokers.contact(m, name) for m in followers))
        reports = dict(zip(followers, answers, strict=True))
        lost = leader_lost(record.epoch, record.leader, record.members, reports,
                           CONTACT_TIMEOUT_S)
        if lost:
            log.warning("stream %s: member %d has not answered for %d probes and its followers "
                        "lost it too (%s): electing another leader", name, record.leader,
                        self.misses.get(record.leader, 0), _contacts(reports))
            self._kept.discard(name)
        elif name not in self._kept:
            log.warning("stream %s: member %d does not answer the driver, but its followers are "
                        "in contact with it (%s): it keeps leading", name, record.leader,
                        _contacts(reports))
            self._kept.add(name)
        return lost

    # --- an election -------------------------------------------------------------------------------

    async def _elect(self, name: str, record: StreamRecord, alive: Mapping[int, int | None],
                     force: bool = False,
                     decide: Callable[[dict[int, Tail | None]], Decision] | None = None) -> None:
        """An election in the next epoch; ``force``: unclean if no majority answers (asked for
        by ``cluster elect --force``); ``decide``: another rule (a transfer's)."""
        async def reserve(epoch: int) -> bool:
            record.epoch, record.leader, record.pids = epoch, NO_LEADER, {}
            record.unclean = False
            self._save()  # before any member hears of it
            self._publish_directory()
            return True

        members, current = list(record.members), record.epoch
        if force:
            def decide(answers: dict[int, Tail | None]) -> Decision:
                return elect(members, current, answers, force=True)
        outcome = await run_election(name, record.members, record.epoch, reserve, self.brokers,
                                     reachable=set(alive), decide=decide)
        if outcome.deleted:
            log.info("stream %s: deleted on a majority of its members, forgotten", name)
            del self.records[name]
            self._save()
            self._publish_directory()
            return
        if outcome.leader == NO_LEADER:
            return
        assert outcome.decision is not None
        record.pids = {str(m): alive.get(m) or 0 for m in outcome.assigned}
        record.unclean = outcome.decision.unclean
        record.leader = outcome.leader  # last: a reader that sees the leader sees the rest
        if record.unclean:
            log.warning("stream %s: UNCLEAN election, as asked: member %d leads epoch %d without "
                        "a majority (fenced: %s); messages confirmed by the others may be lost",
                        name, record.leader, record.epoch, list(outcome.decision.fenced))
        self._save()
        self._publish_directory()

    async def _transfer(self, name: str, record: StreamRecord, target: int | None,
                        alive: Mapping[int, int | None]) -> str | None:
        """A planned transfer to ``target``: the leader sealed (no publishes; its feeds and
        commits go on), then, once the target holds the leader's whole log (transfer_ready,
        within TRANSFER_WAIT_S), an election in the next epoch with the target preferred. A
        target that does not catch up in time leaves the leader leading, unsealed. Returns
        why the target does not lead (logged too), None when it does."""
        leader, epoch = record.leader, record.epoch
        if target is None or target not in record.members or target not in alive:
            why = (f"member {target} is not a member of {name} ({record.members})"
                   if target not in record.members else f"member {target} is not running")
            log.warning("stream %s: cannot transfer: %s", name, why)
            return why
        if target == leader:
            log.info("stream %s: member %d leads already", name, target)
            return None
        if await self.brokers.seal(leader, name, epoch) is None:
            log.warning("stream %s: leader %d could not be sealed: no transfer", name, leader)
            return f"leader {leader} could not be sealed (it did not answer): no transfer"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TRANSFER_WAIT_S
        while True:
            ours, theirs = await asyncio.gather(self.brokers.contact(leader, name),
                                                self.brokers.contact(target, name))
            if (ours is not None and ours.tail is not None and ours.epoch == epoch
                    and theirs is not None and theirs.following and theirs.epoch == epoch
                    and transfer_ready(ours.tail, theirs.tail)):
                break
            if loop.time() > deadline:
                await self.brokers.seal(leader, name, epoch, on=False)
                why = (f"member {target} did not catch up with leader {leader} in "
                       f"{TRANSFER_WAIT_S:.0f} s ({_tail(theirs)} vs {_tail(ours)}): no "
                       f"transfer, member {leader} leads on")
                log.warning("stream %s: %s", name, why)
                return why
            await asyncio.sleep(TRANSFER_POLL_S)
        members = list(record.members)

        def decide(answers: dict[int, Tail | None]) -> Decision:
            return transfer(members, epoch, target, answers)
        await self._elect(name, record, alive, decide=decide)
        if record.leader == target:
            return None
        if record.leader == NO_LEADER:
            return f"the election in epoch {record.epoch} found no majority: no leader yet"
        return f"the election in epoch {record.epoch} chose member {record.leader}"

    async def _assign(self, name: str, record: StreamRecord, member: int, role: Role) -> bool:
        return await self.brokers.assign(member, name, record.epoch, role, record.leader,
                                         record.members)

    # --- what the driver knows -------------------------------------------------------------------

    def _discover(self) -> list[str]:
        """The replicated streams: the driver's records, and any stream whose members' state
        files name a member set the driver has no record of yet (created and assigned by hand,
        or before the driver ran)."""
        for path in sorted(self.data_dir.glob("node-*/streams/*/replication.json")):
            name = _unquote_dir(path.parent.name)
            if name in self.records:
                continue
            try:
                doc = json.loads(path.read_text())
                epoch, members, role = int(doc["epoch"]), [int(m) for m in doc["members"]], doc["role"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if role != "leader" or len(members) < 2:
                continue  # the leader's file names the member set; a follower's may be older
            node = int(path.parts[-4].removeprefix("node-"))
            self.records[name] = StreamRecord(epoch, node, members, self._adopting(members))
            self._save()
            self._publish_directory()
            log.info("stream %s: found, epoch %d, led by member %d of %s", name, epoch, node,
                     members)
        return sorted(self.records)

    def _adopting(self, members: list[int]) -> dict[str, int]:
        """A stream found already assigned: its members hold their roles as of now."""
        return {str(m): pid for m in members if (pid := self._alive.get(m)) is not None}

    def _load(self) -> dict[str, StreamRecord]:
        path = self.data_dir / RECORD
        if not path.is_file():
            return {}
        doc = json.loads(path.read_text())
        return {name: StreamRecord(**entry) for name, entry in doc.items()}

    def _save(self) -> None:
        path = self.data_dir / RECORD
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as out:
            json.dump({n: asdict(r) for n, r in sorted(self.records.items())}, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)

    def _publish_directory(self) -> None:
        """The stream directory every node reads (Metadata's leader and replicas)."""
        path = self.data_dir / "directory.json"
        streams: dict[str, Any] = {}
        for name, r in sorted(self.records.items()):
            leader = None if r.leader == NO_LEADER else f"{self.host}:{self.ports[r.leader]}"
            streams[name] = {"epoch": r.epoch, "leader": leader,
                             "replicas": [f"{self.host}:{self.ports[m]}" for m in r.members
                                          if m != r.leader]}
        supers = self._super_streams()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"streams": streams, "super_streams": supers}, indent=1))
        os.replace(tmp, path)
        self._published_supers = supers

    def _super_streams(self) -> dict[str, Any]:
        """The replicated super streams the nodes recorded (each on the node that received its
        create), for every node to answer Partitions and Route."""
        found: dict[str, Any] = {}
        for path in sorted(self.data_dir.glob("node-*/superstreams.json")):
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            for name, entry in (doc.items() if isinstance(doc, dict) else ()):
                args = entry.get("arguments") if isinstance(entry, dict) else None
                if isinstance(args, dict) and str(args.get("initial-cluster-size", "1")) != "1":
                    found[name] = {"partitions": entry.get("partitions"),
                                   "binding_keys": entry.get("binding_keys")}
        return found


def _tail(contact: Contact | None) -> str:
    """A member's log as a transfer's outcome names it."""
    if contact is None:
        return "not answering"
    if contact.tail is None:
        return "no log"
    return f"last chunk {contact.tail.chunk_id} of epoch {contact.tail.epoch}"


def _contacts(reports: Mapping[int, Contact | None]) -> str:
    def one(c: Contact | None) -> str:
        if c is None:
            return "not answering"
        if not c.following:
            return f"not following (epoch {c.epoch})"
        return "link down" if c.age is None else f"heard {c.age:.1f} s ago"
    return ", ".join(f"member {m}: {one(c)}" for m, c in sorted(reports.items()))


def _unquote_dir(name: str) -> str:
    return unquote(name)
