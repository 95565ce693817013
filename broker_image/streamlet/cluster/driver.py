"""The local cluster's placement driver: it elects replicated streams' leaders by the pure rule
(streamlet.replication.election) through the brokers' private Fence and Assign
(streamlet.driver.elector), changes member sets one member at a time (replication.membership:
``cluster members``, members down past ``--replace-after`` replaced), carries out ``elect
--force``, ``transfer`` and ``rebalance`` requests, and writes the stream directory. A leader is
replaced only when it and the followers in contact with it are no quorum; every epoch and
change is recorded in ``driver.json`` before any member hears of it.
Mechanism: docs/replication.md#the-local-placement-driver-streamlet-cluster-up.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..driver.elector import Members, join, run_election
from ..rabbitmq import Code
from ..rabbitmq.constants import Role
from ..replication.election import Decision, elect, transfer, transfer_ready
from ..replication.liveness import Contact, leader_lost
from ..replication.membership import (
    Action,
    Change,
    Kind,
    Led,
    caught_up,
    change_refusal,
    change_step,
    lost_since,
    next_change,
    rebalance,
)
from ..replication.model import NO_LEADER, Tail
from ..replication.placement import Load, Pod
from . import requests
from .plan import CHANGE_TIMEOUT_S, REPLACE_AFTER_S

if TYPE_CHECKING:
    from .supervisor import Supervisor

log = logging.getLogger("streamlet.cluster")

RECORD = "driver.json"
TICK_S = 0.5
#: The tick while a member set change is under way (a learner's catch-up is looked at), and
#: how often a new request is looked for between ticks.
CHANGE_TICK_S = 0.2
REQUEST_POLL_S = 0.1
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
#: Without a change under way, the members' tails are looked at this often (``in_sync``).
LOOK_S = 2.0
#: What ``cluster status`` shows of each stream beyond the record (``in_sync``, ``changing``):
#: written when it changes, not fsynced (the driver's view, lost with it).
STATUS_FILE = "driver-status.json"


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
    #: the member count wanted (set from the members at discovery, by ``cluster members``)
    replicas: int = 0
    #: the change under way: {"kind": "add"|"remove", "member": m, "started": wall-clock s,
    #: "asked": by ``cluster members``}; None: none
    change: dict[str, Any] | None = None
    #: former members (and learners given up) still to be told to drop their copy
    leaving: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.replicas < 1:
            self.replicas = len(self.members)


@dataclass
class Look:
    """The members' tails as the driver saw them last (one ReplicaContact each)."""

    epoch: int
    leader: int
    #: the leader's last chunk id then (None: it did not answer as the leader)
    leader_tail: int | None
    #: the leader's last chunk id at the look before (this one's when none): what a follower
    #: must hold to be in sync
    target: int | None
    in_sync: frozenset[int]
    contacts: dict[int, Contact | None]
    at: float
    #: members whose broker runs but holds no copy (its data was lost)
    empty: frozenset[int] = frozenset()


class LocalDriver:
    def __init__(self, data_dir: Path, host: str, ports: list[int],
                 credentials: tuple[str, str] = ("guest", "guest"),
                 peer_ports: list[int] | None = None,
                 replace_after: float = REPLACE_AFTER_S) -> None:
        """``ports``: where the driver reaches each node; ``peer_ports``: where nodes and clients
        reach each other (the directory's addresses, a follower's leader), when they differ;
        ``replace_after``: seconds a member's node is down (exited, stopped, or failing the
        driver's probes) before the member is replaced (0: never)."""
        self.data_dir = data_dir
        self.replace_after = replace_after
        #: since when (monotonic) each node has been down, for the nodes down now
        self.down_since: dict[int, float] = {}
        self._looks: dict[str, Look] = {}
        self._steps: dict[str, str] = {}  # the step of each change under way, for status
        self._said: dict[str, str] = {}  # why a lost member is not replaced, logged once
        self._shown: Any = None  # what the status file holds
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
            await self._pause(supervisor)

    async def _pause(self, supervisor: Supervisor) -> None:
        """Until the next tick: TICK_S (CHANGE_TICK_S while a member set change is under way),
        or sooner when a node starts or exits, or a request is left (looked for every
        REQUEST_POLL_S: a command's request is taken up at once, not a tick later)."""
        changing = any(r.change is not None for r in self.records.values())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (CHANGE_TICK_S if changing else TICK_S)
        while (left := deadline - loop.time()) > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(supervisor.changed(), min(left, REQUEST_POLL_S))
                return
            if requests.read(self.data_dir):
                return

    async def tick(self, alive: Mapping[int, int | None]) -> None:
        """``alive``: node index -> broker pid, for the nodes running now."""
        self._alive = alive
        names = self._discover()
        if self._super_streams() != self._published_supers:
            self._publish_directory()
        asked = {(r.kind, r.stream): r for r in requests.read(self.data_dir)}
        for r in asked.values():
            if r.kind == requests.REBALANCE or r.stream in self.records:
                continue
            why = (await self._adopt(r.stream) if r.kind == requests.MEMBERS
                   and r.change == Kind.ADD.value else f"no replicated stream {r.stream}")
            if why is not None:
                log.warning("request to %s %s: %s", r.kind, r.stream, why)
                requests.done(self.data_dir, r, why)
        names = sorted(self.records)
        leaders = {self.records[n].leader for n in names} - {NO_LEADER}
        held = {m for n in names for m in self.records[n].members} if self.replace_after else set()
        suspects = await self._suspects(leaders, held)
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
                if name in self.records and record.change is not None:
                    self._steps[name] = "waiting for the election"
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
            await self._membership(name, record, asked.get((requests.MEMBERS, name)))
        balance = asked.get((requests.REBALANCE, ""))
        if balance is not None:
            requests.done(self.data_dir, balance, await self._rebalance())
        self._show()

    async def _suspects(self, leaders: set[int], others: Collection[int] = ()) -> set[int]:
        """The leaders whose broker did not answer a login for SUSPECT_AFTER ticks in a row (a
        process that runs but does not work, or a path to it that fails): their followers are
        asked whether they lost it too. Followers are probed only when members are replaced
        (``others``): a stuck follower costs no availability. Keeps ``down_since``: a node
        not running, or failing its probe, is down."""
        probed = sorted(leaders | set(others))
        results = await asyncio.gather(*(self.brokers.probe(n) for n in probed))
        # a node that leads nothing now starts from no misses when it leads again
        self.misses = {node: 0 if ok else self.misses.get(node, 0) + 1
                       for node, ok in zip(probed, results, strict=True)}
        now = time.monotonic()
        for node in range(len(self.ports)):
            if node not in self._alive or self.misses.get(node, 0) > 0:
                self.down_since.setdefault(node, now)
            else:
                self.down_since.pop(node, None)
        return {n for n, missed in self.misses.items()
                if missed >= SUSPECT_AFTER and n in leaders}

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

    # --- member set changes ----------------------------------------------------------------------

    async def _membership(self, name: str, record: StreamRecord,
                          asked: requests.Request | None) -> None:
        """One step of the stream's member set: former members told to leave, then the change
        under way carried on (or one started: asked for, or the next toward ``replicas``)."""
        for m in list(record.leaving):
            if m in record.members or (m in self._alive
                                       and await self.brokers.leave(m, name, record.epoch)):
                record.leaving.remove(m)
                self._save()
                log.info("stream %s: member %d no longer holds it", name, m)
        change = _change(record)
        look = self._looks.get(name)
        if (change is not None or asked is not None or look is None
                or time.monotonic() - look.at >= LOOK_S or self._lost_members(record, look)
                or not {m for m in record.members if m in self._alive} <= look.in_sync):
            # (the last: a running member catching up is looked at each tick until in sync)
            look = await self._look(name, record, [] if change is None else [change.member])
        if asked is not None and not (change is not None and record.change is not None
                                      and record.change.get("asked")
                                      and change == _asked_change(asked)):
            wanted = _asked_change(asked)
            why = self._refusal(record, look, wanted, change)
            if why is not None:
                log.warning("stream %s: %s refused: %s", name, wanted, why)
                requests.done(self.data_dir, asked, why)
                return
            change = self._begin(name, record, wanted, asked=True)
        elif change is None:
            change = self._next(name, record, look)
            if change is None:
                self._steps.pop(name, None)
                return
            self._begin(name, record, change, asked=False)
        await self._advance(name, record, change, look, asked)

    def _refusal(self, record: StreamRecord, look: Look, change: Change,
                 changing: Change | None) -> str | None:
        if not 0 <= change.member < len(self.ports):
            return f"no node {change.member}: the nodes are 0..{len(self.ports) - 1}"
        if (change.kind is Kind.ADD and change.member not in record.members
                and (change.member not in self._alive or change.member in self.down_since)):
            return f"node {change.member} is not running"
        return change_refusal(record.members, record.leader, look.in_sync, change, changing)

    def _lost_members(self, record: StreamRecord, look: Look | None = None) -> list[int]:
        """The members whose node has been down longer than ``replace_after``, and those whose
        node runs without a copy (at ``look``: its data was lost, waiting brings nothing)."""
        if not self.replace_after:
            return []
        down = lost_since(self.down_since, time.monotonic(), self.replace_after)
        empty = look.empty if look is not None and look.epoch == record.epoch else frozenset()
        return [m for m in record.members if m in empty or m in down]

    def _next(self, name: str, record: StreamRecord, look: Look) -> Change | None:
        """The next change toward ``replicas`` healthy members (membership.next_change), when
        it may start now."""
        lost = self._lost_members(record, look)
        if not lost and record.replicas == len(record.members):
            return None
        pods = [Pod(i, ready=i in self._alive and i not in self.down_since)
                for i in range(len(self.ports))]
        load = Load.holding(r.members for r in self.records.values())
        step = next_change(record.replicas, record.members, record.leader, pods, load, lost)
        empty = [m for m in lost if m in look.empty and m != record.leader]
        if step.change is None and empty:  # no other node: out, then in again with a new copy
            step = replace(step, change=Change(Kind.REMOVE, empty[0]),
                           why=f"member {empty[0]}'s node holds no copy and no other node can "
                               "take it: removed, then added again")
        if step.change is None:
            said = f"member {', '.join(map(str, lost))} lost: {step.why}"
            if lost and self._said.get(name) != said:  # said once, not every tick
                log.warning("stream %s: %s", name, said)
                self._said[name] = said
            return None
        why = change_refusal(record.members, record.leader, look.in_sync, step.change)
        if why is not None:
            said = f"{step.change} ({step.why}) waits: {why}"
            if self._said.get(name) != said:
                log.info("stream %s: %s", name, said)
                self._said[name] = said
            return None
        log.warning("stream %s: %s: %s", name, step.why, step.change)
        return step.change

    def _begin(self, name: str, record: StreamRecord, change: Change, asked: bool) -> Change:
        record.change = {"kind": change.kind.value, "member": change.member,
                         "started": time.time(), "asked": asked}
        if asked:
            record.replicas = len(change.apply(record.members))
        if change.member in record.leaving and change.kind is Kind.ADD:
            record.leaving.remove(change.member)  # it is to learn, not to drop its copy
        self._save()
        log.info("stream %s: %s begins (members %s, epoch %d)", name, change, record.members,
                 record.epoch)
        return change

    async def _advance(self, name: str, record: StreamRecord, change: Change, look: Look,
                       asked: requests.Request | None) -> None:
        """What membership.change_step says to do next, done."""
        assert record.change is not None
        waited = time.time() - float(record.change.get("started", 0))
        if look.target is None:  # the leader did not answer: nothing to compare with
            late = waited > CHANGE_TIMEOUT_S
            action, why, to = (Action.ABORT if late else Action.WAIT,
                               f"member {record.leader} does not answer as the leader", None)
        else:
            learner = look.contacts.get(change.member) if change.kind is Kind.ADD else None
            step = change_step(change, record.epoch, record.members, record.leader,
                               look.in_sync, learner, look.target, waited, CHANGE_TIMEOUT_S)
            action, why, to = step.action, step.why, step.to
        self._steps[name] = why
        if action is Action.LEARN:
            if change.member in self._alive:
                await self.brokers.learn(record.leader, name, record.epoch, change.member)
        elif action is Action.JOIN:
            await self._join(name, record, change)
            self._steps.pop(name, None)
            if asked is not None:
                requests.done(self.data_dir, asked)
        elif action is Action.TRANSFER:
            await self._transfer(name, record, to, self._alive)
            self._looks.pop(name, None)
        elif action is Action.ABORT:
            log.warning("stream %s: %s given up: %s", name, change, why)
            if change.kind is Kind.ADD and change.member not in record.leaving:
                record.leaving.append(change.member)
            if record.change.get("asked"):
                record.replicas = len(record.members)
            record.change = None
            self._save()
            self._steps.pop(name, None)
            if asked is not None:
                requests.done(self.data_dir, asked, f"{change} given up: {why}")

    async def _join(self, name: str, record: StreamRecord, change: Change) -> None:
        """The next epoch with the changed member set: recorded (the change done, a removed
        member to leave), then assigned, the leader kept (elector.join)."""
        new = list(change.apply(record.members))
        alive = self._alive

        async def reserve(epoch: int) -> bool:
            record.epoch, record.members, record.pids = epoch, new, {}
            record.unclean, record.change = False, None
            if change.kind is Kind.REMOVE and change.member not in record.leaving:
                record.leaving.append(change.member)
            self._save()  # before any member hears of it
            self._publish_directory()
            return True

        outcome = await join(name, new, record.epoch, record.leader, reserve, self.brokers,
                             reachable=set(alive))
        record.pids = {str(m): alive.get(m) or 0 for m in outcome.assigned}
        self._looks.pop(name, None)
        self._save()
        if record.leader not in outcome.assigned:  # its pid forgotten: the next tick elects
            log.warning("stream %s: %s recorded (members %s in epoch %d), but leader %d did not "
                        "take the epoch: a leader is elected among them", name, change, new,
                        record.epoch, record.leader)
            return
        log.info("stream %s: %s done: members %s in epoch %d", name, change, new, record.epoch)

    async def _look(self, name: str, record: StreamRecord, extra: Sequence[int] = ()) -> Look:
        """The members' (and ``extra``'s) tails now; in sync: the leader and each follower of
        its epoch holding the leader's last chunk of the previous look."""
        ids = list(record.members) + [m for m in extra if m not in record.members]

        async def ask(m: int) -> Contact | int | None:
            return await self.brokers.contact_or_refusal(m, name) if m in self._alive else None

        answers = dict(zip(ids, await asyncio.gather(*(ask(m) for m in ids)), strict=True))
        contacts = {m: a if isinstance(a, Contact) else None for m, a in answers.items()}
        empty = frozenset(m for m in record.members
                          if answers[m] == Code.STREAM_DOES_NOT_EXIST)
        ours = contacts.get(record.leader)
        tail = (ours.tail.chunk_id if ours is not None and not ours.following
                and ours.epoch == record.epoch and ours.tail is not None else None)
        before = self._looks.get(name)
        target = (before.leader_tail if before is not None and before.epoch == record.epoch
                  and before.leader == record.leader and before.leader_tail is not None
                  else tail)
        in_sync = {record.leader} if tail is not None else set()
        for m in record.members:
            c = contacts.get(m)
            if (m != record.leader and c is not None and c.following
                    and c.epoch == record.epoch and target is not None
                    and caught_up(target, c.tail)):
                in_sync.add(m)
        look = Look(record.epoch, record.leader, tail, target, frozenset(in_sync), contacts,
                    time.monotonic(), empty)
        self._looks[name] = look
        return look

    async def _adopt(self, name: str) -> str | None:
        """A stream of one copy (created without initial-cluster-size) to grow: its holder is
        assigned leader of epoch 1 with itself as the only member (recorded first). Why not,
        or None."""
        holders = sorted(int(d.parts[-3].removeprefix("node-"))
                         for d in self.data_dir.glob("node-*/streams/*")
                         if d.is_dir() and _unquote_dir(d.name) == name)
        if not holders:
            return f"no stream {name} on any node"
        if len(holders) > 1:
            return (f"stream {name} is on nodes {holders} but has no record: not one stream "
                    "the driver can take over")
        (holder,) = holders
        if holder not in self._alive:
            return f"stream {name} is on node {holder}, which is not running"
        record = self.records[name] = StreamRecord(1, NO_LEADER, [holder])
        self._save()  # the epoch reserved before the holder hears of it
        if not await self.brokers.assign(holder, name, 1, Role.LEADER, holder, [holder]):
            return None  # recorded: the next tick elects it
        record.pids = {str(holder): self._alive.get(holder) or 0}
        record.leader = holder
        self._save()
        self._publish_directory()
        log.info("stream %s: one copy on node %d, now its leader in epoch 1 (members [%d])",
                 name, holder, holder)
        return None

    async def _rebalance(self) -> str:
        """Leaders spread evenly (membership.rebalance), one planned transfer at a time: what
        moved, for the command to print."""
        leds: dict[str, Led] = {}
        for name, r in sorted(self.records.items()):
            if r.leader == NO_LEADER or r.change is not None:
                continue
            look = await self._look(name, r)
            leds[name] = Led(r.leader, tuple(r.members), look.in_sync)
        moves = rebalance(leds, [i for i in range(len(self.ports)) if i in self._alive])
        if not moves:
            return "leaders already spread evenly: nothing moved"
        lines = []
        for name, to in moves:
            why = await self._transfer(name, self.records[name], to, self._alive)
            self._looks.pop(name, None)
            lines.append(f"{name}: " + (f"member {to} leads" if why is None else why))
        return "\n".join(lines)

    def _show(self) -> None:
        """``in_sync`` and ``changing`` of each stream for ``cluster status`` (when changed)."""
        doc: dict[str, Any] = {}
        for name, r in sorted(self.records.items()):
            look = self._looks.get(name)
            in_sync = (sorted(look.in_sync) if look is not None and look.epoch == r.epoch
                       and look.leader == r.leader else [])
            changing = None
            if r.change is not None:
                changing = {r.change["kind"]: r.change["member"],
                            "step": self._steps.get(name, "starting")}
            doc[name] = {"in_sync": in_sync, "changing": changing}
        if doc == self._shown:
            return
        _replace(self.data_dir / STATUS_FILE, json.dumps(doc))
        self._shown = doc

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
        _replace(path, json.dumps({"streams": streams, "super_streams": supers}, indent=1))
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


def _replace(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step (a reader sees the old file or the new)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _change(record: StreamRecord) -> Change | None:
    c = record.change
    return None if c is None else Change(Kind(c["kind"]), int(c["member"]))


def _asked_change(asked: requests.Request) -> Change:
    assert asked.change is not None and asked.to is not None
    return Change(Kind(asked.change), asked.to)


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
