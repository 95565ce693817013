"""The operator as placement driver: one Broker's replicated Streams, looked after each tick.

Each tick (handlers/replication.py runs it every ``SETTINGS.replication_interval`` seconds) it
probes the pods, discovers new replicated Streams (one of one copy asked for more is recorded
as a one-member replicated stream, then assigned so), elects where a leader is lost, on a pod
being deleted or forced (the epoch reserved in the Stream's status before any member hears of
it), reassigns restarted members, takes member set changes a step (one change at a time per
stream, recorded first), then carries out the drain and the roll. The decisions are
failover.py's, membership.py's, drain.py's and rolling.py's (pure); this module makes the calls.
Mechanism: docs/replication.md#on-kubernetes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from streamlet.driver.elector import REQUEST_TIMEOUT_S, Members, join, run_election
from streamlet.rabbitmq import Code
from streamlet.rabbitmq.constants import Role
from streamlet.replication.election import Decision, transfer, transfer_ready
from streamlet.replication.membership import (
    Action,
    Kind,
    Led,
    change_refusal,
    change_step,
    lost_since,
    next_change,
)
from streamlet.replication.model import NO_LEADER, Tail
from streamlet.replication.placement import Load, Pod

from . import day2, drain, failover, metrics, names, placement, rolling
from .brokers import BrokerUnavailable
from .builders.directory import Placed
from .builders.statefulset import TEMPLATE_HASH
from .conditions import get_condition, remove_condition, set_condition
from .constants import GROUP, VERSION
from .directory import sync_directory
from .failover import Replication, Step, Unit
from .kube import ApiError
from .model import TIME_FORMAT, BrokerModel
from .runtime import Runtime, operator_port

log = logging.getLogger(__name__)

#: A compare-and-swap that meets a conflict re-reads and tries again this many times.
CAS_ATTEMPTS = 5
#: Events this module posts.
LEADER_ELECTED = "LeaderElected"
FORCE_LEADER_REFUSED = "ForceLeaderRefused"
MEMBER_ADDED = "MemberAdded"
MEMBER_REMOVED = "MemberRemoved"
MEMBER_REPLACED = "MemberReplaced"
MEMBER_CHANGE_ABORTED = "MemberChangeAborted"
#: A planned transfer waits this long for the target to hold the sealed leader's whole log
#: (the leader's seal lifts itself after 30 s), looking every TRANSFER_POLL_S.
TRANSFER_WAIT_S = 10.0
TRANSFER_POLL_S = 0.1
#: The Event of a rebalance done (the Broker's placement.REBALANCE annotation).
REBALANCED = "Rebalanced"
#: A stream whose transfer back to its preferred leader failed is not tried again sooner.
RESTORE_BACKOFF_S = 60.0
#: A preferred leader gets its leadership back once in sync for this long (a pod just back
#: settles first; a stream does not move twice in a row).
RESTORE_SETTLE_S = 30.0
#: A Node's zone label is read again after this long.
NODE_TTL_S = 60.0


def replicated(obj: dict[str, Any], broker: str) -> bool:
    """A created Stream of ``broker`` with more than one copy (a super stream: each of its
    partitions has that many), or with a record of its members (one shrunk to one member)."""
    status = obj.get("status") or {}
    applied = status.get("applied") or {}
    return (applied.get("broker") == broker and bool(status.get("placement"))
            and (int(applied.get("replicas") or 1) > 1 or bool(status.get("replication"))))


def _units(streams: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], Unit]]:
    """Every replicated broker stream of ``streams`` by key, with its Stream."""
    return {u.key: (s, u) for s in streams for u in failover.units(s)}


class Driver:
    """The placement driver of one Broker (its state: probe misses, pods that were away)."""

    def __init__(self, runtime: Runtime, namespace: str, broker: str) -> None:
        self.runtime = runtime
        self.namespace = namespace
        self.broker_name = broker
        self.misses: dict[int, int] = {}
        #: pods that missed a probe since their members were last assigned
        self.away: set[int] = set()
        #: streams whose members this driver has assigned their roles (once after it starts)
        self.assigned: set[str] = set()
        #: each stream's leader's commit point at the last look: (epoch, chunk id)
        self.committed: dict[str, tuple[int, int]] = {}
        #: the replicated streams as this tick saw them (the roll's input)
        self.seen: dict[str, rolling.StreamState] = {}
        #: a drain was asked for at the last look: its end gets an Event even when another
        #: writer of the Broker's conditions dropped Drained first
        self.draining = False
        #: streams whose transfer back to their preferred leader failed: not before (loop time)
        self.restore_after: dict[str, float] = {}
        #: since when (loop time) each stream's preferred leader is in sync but not leading
        self.synced_since: dict[str, float] = {}
        #: the Nodes the pods run on, by name: read again after (loop time), the Node or None
        self.nodes: dict[str, tuple[float, dict[str, Any] | None]] = {}
        #: each pod's zone this tick (None: no zone label, or the Node is not readable)
        self.pod_zones: dict[int, str | None] = {}
        #: pods not fit to hold a member (unreachable or not Ready) since when (monotonic)
        self.unready_since: dict[int, float] = {}
        #: Pod objects seen not Ready, by uid: since when (monotonic), for the roll's timeout
        #: where the Pod's Ready condition carries no transition time
        self.not_ready_seen: dict[str, float] = {}
        #: this tick's view for member set changes: the pods, the members lost, the load
        self.change_pods: list[Pod] = []
        self.lost: frozenset[int] = frozenset()
        self.load = Load()
        #: an add's target: the leader's last chunk id at the previous look, by (key, member)
        self.targets: dict[tuple[str, int], int] = {}
        #: why a stream's next change cannot start, as last logged
        self.held: dict[str, str] = {}

    # --- a tick --------------------------------------------------------------------------------

    async def tick(self) -> None:
        body = await self.runtime.kube.get("Broker", self.namespace, self.broker_name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        if day2.paused(_annotations(body)):
            return  # no election, move, drain, roll nor rebalance (handlers/broker.py says so)
        broker = BrokerModel.from_body(body)
        every = [s for s in await self.runtime.kube.list("Stream", self.namespace)
                 if not s["metadata"].get("deletionTimestamp")]
        streams = [s for s in every if replicated(s, broker.name)]
        pods = await self._pods(broker)
        request = drain.requested(_annotations(body),
                                  {o: _annotations(pod) for o, pod in pods.items()})
        self.seen = {}
        up = None
        members = None
        self.pod_zones = await self.zones(pods)
        await self._publish_zones(broker)
        if streams:
            members = await self._members(broker)
            up = await self._replication(broker, members, streams, pods, request.ordinals)
        await self._drain(body, broker, members, every, up, request)
        await self._roll(body, broker, members, streams, pods, up, request.ordinals)
        await self._leaderships(body, broker, members,
                                [s for s in streams if not day2.paused(_annotations(s))],
                                pods, up, request.ordinals)

    async def _replication(self, broker: BrokerModel, members: Members,
                           streams: list[dict[str, Any]], pods: dict[int, dict[str, Any]],
                           drained: frozenset[int] = frozenset()) -> set[int]:
        """Probes, elections and observations of the replicated streams; the pods that
        answered. An election avoids ``drained`` pods as it does pods being deleted."""
        probed = range(max([broker.replicas] + [m + 1 for s in streams
                                                 for u in failover.units(s)
                                                 for m in _members_of(s, u)]))
        answers = await asyncio.gather(*(members.probe(p) for p in probed))
        up = set()
        for pod, ok in zip(probed, answers, strict=True):
            if ok:
                up.add(pod)
                self.misses[pod] = 0
            else:
                self.misses[pod] = self.misses.get(pod, 0) + 1
                self.away.add(pod)
        back = self.away & up
        draining = frozenset(o for o, pod in pods.items()
                             if pod["metadata"].get("deletionTimestamp"))
        self._change_facts(broker, streams, pods, up, drained, set(probed))
        for obj, unit in _units(streams).values():
            if day2.paused(_annotations(obj)):
                continue  # a paused Stream: not elected, changed nor observed (a roll waits)
            try:
                await self._drive(broker, members, obj, unit, up, back, draining, drained)
            except Exception:  # one stream's trouble does not stop the others'
                log.exception("%s: placement driver step failed", unit.key)
        self.away -= back
        return up

    async def _members(self, broker: BrokerModel) -> Members:
        """The brokers, as the operator's other sessions reach them (runtime.broker_address:
        TLS on spec.tls.port when it uses TLS); Assign names a leader by its client port
        (BrokerModel.leader_port), which each follower maps to its own cluster.peers; each
        request carries the operator's fencing token when it leads through a Lease."""
        credentials = await self.runtime.broker_credentials(broker.namespace, broker.name)
        tls = await self.runtime.broker_tls(broker)
        resolve, ns, name = self.runtime.resolve, broker.namespace, broker.name
        port = operator_port(broker, tls)
        return _Members(lambda m: resolve(ns, name, m, port), credentials,
                        connection_name="streamlet operator",
                        peer_address=lambda m: resolve(ns, name, m, broker.leader_port),
                        tls=tls.context() if tls is not None else None,
                        token=self.runtime.fencing_token())

    async def _pods(self, broker: BrokerModel) -> dict[int, dict[str, Any]]:
        """The Broker's Pod objects by ordinal: those being deleted (a drain, a roll, a
        scale-down) have their leaderships moved before their brokers stop, and the roll
        compares their template hash. Listed, not watched: a tick a second is soon enough,
        and a pod that vanished fails its probes anyway."""
        pods = await self.runtime.kube.list("Pod", broker.namespace,
                                            labels=names.selector(broker.name))
        prefix = f"{broker.name}-"
        result = {}
        for pod in pods:
            suffix = pod["metadata"]["name"].removeprefix(prefix)
            if suffix.isdigit():
                result[int(suffix)] = pod
        return result

    async def _drive(self, broker: BrokerModel, members: Members, obj: dict[str, Any],
                     unit: Unit, up: set[int], back: set[int], draining: frozenset[int],
                     drained: frozenset[int] = frozenset()) -> None:
        name, key = obj["metadata"]["name"], unit.key
        status = obj.get("status") or {}
        record = failover.record_of(status, unit)
        if record is None:
            await self._discover(broker, members, obj, unit)
            return
        wanted = (obj["metadata"].get("annotations") or {}).get(failover.FORCE_LEADER)
        preferred, refused = failover.parse_force(wanted, record.members, unit.partition)
        if refused is not None:
            await self._event(obj, "Warning", FORCE_LEADER_REFUSED, refused)
            await self._unannotate(name, unit.partition)
        step = failover.next_step(record, self.misses, up, preferred is not None, draining)
        if step is not Step.NONE:
            await self.elect(broker, members, obj, record, up, preferred, draining | drained,
                             unit=unit)
            return
        if record.leader is None:  # no majority answers: nobody in sync, nothing to observe
            self.seen[key] = rolling.StreamState(key, record.members, None, frozenset())
            return
        first = key not in self.assigned
        returning = [m for m in record.members if m in up and (first or m in back)]
        if returning and record.leader is not None:
            await self._reassign(members, unit, record, returning)
        record = await self._observe(broker, obj, unit, record, up)
        await self._change(broker, members, obj, unit, record, up)

    # --- the drain ----------------------------------------------------------------------------

    async def _drain(self, body: dict[str, Any], broker: BrokerModel, members: Members | None,
                     every: list[dict[str, Any]], up: set[int] | None,
                     request: drain.Request) -> None:
        """The transfers drain.progress asks for, and the Broker's Drained condition (absent
        while no pod is drained; an Event when a drain starts, completes and ends)."""
        asked = bool(request.ordinals or request.problems)
        if not asked and not self.draining and get_condition(
                (body.get("status") or {}).get("conditions"), drain.DRAINED) is None:
            return  # the usual tick: nothing drained, nothing to clear
        # Read again: the roll, the Broker reconciler and the transfers write its status too.
        fresh = await self.runtime.kube.get("Broker", self.namespace, self.broker_name)
        if fresh is None:
            return
        body = fresh
        current = list((body.get("status") or {}).get("conditions") or [])
        had = get_condition(current, drain.DRAINED)
        if not asked:
            if had is not None:
                await self._broker_conditions(remove_condition(current, drain.DRAINED))
            if had is not None or self.draining:
                await self._event(body, "Normal", drain.DRAIN_ENDED,
                                  "no pod is drained: every pod takes streams again",
                                  involved="Broker")
            self.draining = False
            return
        started, self.draining = not self.draining, True
        placed = [p for s in every for p in self._placed(s, broker)]
        result = drain.progress(request.ordinals, placed, broker.replicas, broker.name)
        if members is not None and up is not None:
            by_key = _units([s for s in every if replicated(s, broker.name)])
            for key, target in result.transfers:
                log.info("%s/%s: drain: moving %s's leadership to pod %d", self.namespace,
                         broker.name, key, target)
                obj, unit = by_key[key]
                if day2.paused(_annotations(obj)):
                    continue
                try:
                    await self.transfer(broker, members, obj, target, up, unit=unit)
                except Exception:
                    log.exception("%s/%s: transfer to pod %d failed", self.namespace, key,
                                  target)
        message = "; ".join((result.message, *request.problems))
        wanted = set_condition(current, drain.DRAINED, result.complete, result.reason, message)
        if wanted == current:
            return
        await self._broker_conditions(wanted)
        if had is None and started:
            await self._event(body, "Normal", drain.DRAIN_STARTED,
                              f"draining {drain.pod_names(broker.name, request.ordinals)}: "
                              + message, involved="Broker")
        if result.complete and (had or {}).get("status") != "True":
            await self._event(body, "Normal", drain.DRAIN_COMPLETE, message,
                              involved="Broker")

    def _placed(self, obj: dict[str, Any], broker: BrokerModel) -> list[drain.Placed]:
        """A Stream of this Broker as the drain sees it: one entry, or one per partition of a
        replicated super stream (none: another Broker's, or not created on a pod yet)."""
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        applied = status.get("applied") or {}
        if applied.get("broker") != broker.name:
            return []
        if replicated(obj, broker.name):
            result = []
            for unit in failover.units(obj):
                seen = self.seen.get(unit.key)
                if seen is not None:
                    result.append(drain.Placed(unit.key, seen.members, True, seen.leader,
                                               seen.in_sync))
                    continue
                record = failover.record_of(status, unit)
                members = record.members if record else tuple(range(broker.replicas))
                result.append(drain.Placed(unit.key, members, True,
                                           record.leader if record else None, None))
            return result
        pods = {int(p["ordinal"]) for p in status.get("placement") or ()}
        move = status.get("move") or {}
        if move.get("from") is not None:  # the old pod holds it until the move ends
            pods.add(int(move["from"]))
        return [drain.Placed(name, tuple(sorted(pods)))]

    async def _broker_conditions(self, conditions: list[dict[str, Any]]) -> None:
        await self.runtime.kube.patch("Broker", self.namespace, self.broker_name,
                                      {"status": {"conditions": conditions}},
                                      subresource="status")

    # --- the roll -----------------------------------------------------------------------------

    async def _roll(self, body: dict[str, Any], broker: BrokerModel, members: Members | None,
                    streams: list[dict[str, Any]], pods: dict[int, dict[str, Any]],
                    up: set[int] | None, drained: frozenset[int] = frozenset()) -> None:
        """One step of the roll of pods made from an older template (rolling.next_step),
        and the Broker's Rolling condition saying where it stands."""
        sts = await self.runtime.kube.get("StatefulSet", broker.namespace, broker.name)
        if sts is None:
            return
        revision = _annotations(sts["spec"].get("template") or {}).get(TEMPLATE_HASH)
        states = [rolling.PodState(o, _annotations(pod).get(TEMPLATE_HASH), _ready(pod),
                                   bool(pod["metadata"].get("deletionTimestamp")),
                                   self._not_ready_for(pod))
                  for o, pod in sorted(pods.items())]
        listed = {str(p["metadata"].get("uid") or p["metadata"]["name"]) for p in pods.values()}
        self.not_ready_seen = {u: t for u, t in self.not_ready_seen.items() if u in listed}
        by_key = _units(streams)
        seen = [self.seen.get(key) or rolling.StreamState(key, tuple(_members_of(s, u)), None,
                                                          None)
                for key, (s, u) in by_key.items()]
        rolling_now = get_condition((body.get("status") or {}).get("conditions"),
                                    rolling.ROLLING)
        step = rolling.next_step(states, revision, seen, up, int(sts["spec"].get("replicas") or 0),
                                 in_progress=(rolling_now or {}).get("status") == "True",
                                 avoid=drained, not_ready_timeout=broker.not_ready_timeout)
        await self._rolling_condition(body, step)
        if step.reason == rolling.ROLLING_FORWARD:
            await self._event(body, "Warning", rolling.POD_ROLLED_FORWARD, step.message,
                              involved="Broker")
        if step.action is rolling.Action.TRANSFER and members is not None:
            assert up is not None
            for key, target in step.transfers:
                obj, unit = by_key[key]
                try:
                    await self.transfer(broker, members, obj, target, up, unit=unit)
                except Exception:
                    log.exception("%s/%s: transfer to pod %d failed", self.namespace, key, target)
        elif step.action is rolling.Action.DELETE:
            assert step.pod is not None
            log.info("%s/%s: %s", self.namespace, broker.name, step.message)
            await self.runtime.kube.delete("Pod", broker.namespace,
                                           names.pod(broker.name, step.pod))
        elif step.action is rolling.Action.WAIT:
            log.info("%s/%s: roll waits: %s", self.namespace, broker.name, step.message)

    def _not_ready_for(self, pod: dict[str, Any]) -> float | None:
        """Seconds the Pod has not been Ready (None: Ready): since its Ready condition's
        lastTransitionTime, or its creation when it has none, and at least since this driver
        first saw it so (a Pod whose status carries neither)."""
        meta = pod["metadata"]
        uid = str(meta.get("uid") or meta["name"])
        if _ready(pod):
            self.not_ready_seen.pop(uid, None)
            return None
        now = time.monotonic()
        seen = now - self.not_ready_seen.setdefault(uid, now)
        ready = [c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Ready"]
        stamp = (ready[0].get("lastTransitionTime") if ready else None) or meta.get(
            "creationTimestamp")
        try:
            since = datetime.strptime(str(stamp), TIME_FORMAT).replace(tzinfo=UTC)
        except ValueError:
            return seen
        return max(seen, (datetime.now(UTC) - since).total_seconds())

    async def _rolling_condition(self, body: dict[str, Any], step: rolling.Step) -> None:
        """The Broker's Rolling condition, written when it changes (absent until a roll)."""
        current = list((body.get("status") or {}).get("conditions") or [])
        idle = step.action is rolling.Action.IDLE
        if idle and get_condition(current, rolling.ROLLING) is None:
            return
        wanted = set_condition(current, rolling.ROLLING, not idle, step.reason, step.message)
        if wanted != current:
            await self.runtime.kube.patch("Broker", self.namespace, self.broker_name,
                                          {"status": {"conditions": wanted}},
                                          subresource="status")

    async def transfer(self, broker: BrokerModel, members: Members, obj: dict[str, Any],
                       target: int, up: set[int], unit: Unit | None = None) -> bool:
        """A planned transfer of ``obj``'s leadership to member ``target``: the leader sealed
        (ReplicaSeal: publishes refused with 6, what it took still replicated and confirmed;
        the seal lifts itself after 30 s), then, once the target holds the leader's whole log
        (transfer_ready, within TRANSFER_WAIT_S), an election in the next epoch with the
        target preferred. A target that does not catch up in time: the leader is unsealed and
        keeps leading (False)."""
        unit = unit or failover.units(obj)[0]
        fresh = await self.runtime.kube.get("Stream", self.namespace, obj["metadata"]["name"])
        record = failover.record_of((fresh or {}).get("status"), unit)
        if fresh is None or record is None or record.leader is None or target == record.leader:
            return False
        stream = unit.stream
        leader, epoch = record.leader, record.epoch
        if await members.seal(leader, stream, epoch) is None:
            log.warning("%s: leader %d could not be sealed: no transfer", stream, leader)
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TRANSFER_WAIT_S
        while True:
            ours, theirs = await asyncio.gather(members.contact(leader, stream),
                                                members.contact(target, stream))
            if (ours is not None and ours.tail is not None and ours.epoch == epoch
                    and theirs is not None and theirs.following and theirs.epoch == epoch
                    and transfer_ready(ours.tail, theirs.tail)):
                break
            if loop.time() > deadline:
                await members.seal(leader, stream, epoch, on=False)
                log.warning("%s: member %d did not catch up with leader %d in %.0f s: no"
                            " transfer", stream, target, leader, TRANSFER_WAIT_S)
                return False
            await asyncio.sleep(TRANSFER_POLL_S)

        def rule(answers: dict[int, Tail | None]) -> Decision:
            return transfer(record.members, epoch, target, answers, in_sync=record.in_sync)
        return await self.elect(broker, members, fresh, record, up, rule=rule, unit=unit)

    # --- discovery ------------------------------------------------------------------------------

    async def _discover(self, broker: BrokerModel, members: Members, obj: dict[str, Any],
                        unit: Unit) -> None:
        status = obj["status"]
        stream = unit.stream
        holders = []
        for pod in range(broker.replicas):
            try:
                async with self._session(broker, pod) as session:
                    if await session.stream_exists(stream):
                        holders.append(pod)
            except Exception as e:  # down now: discovered once every copy answers
                log.debug("%s: pod %d: %s", stream, pod, e)
        replicas = int(status["applied"]["replicas"])
        if unit.partition is None:
            leader = int(status["placement"][0]["ordinal"])
            record = failover.discovered(leader, holders, replicas)
            if record is None and holders == [leader]:  # one copy asked to grow?
                record = failover.one_copy(leader, holders, await _plain(members, leader, stream),
                                           moving=bool(status.get("move")))
                if record is not None:
                    await self._adopt(broker, members, unit, record)
                    return
            if record is None:
                self._held(unit.key, f"members not known yet: pods {holders} hold it,"
                                     f" {replicas} copies asked for")
        else:  # the partitions' leaders were spread by the broker: each holder says its role
            contacts = {m: await members.contact(m, stream) for m in holders}
            record = failover.discovered_partition(contacts, replicas)
        if record is None:
            return
        # A partition's placement names its leader from now on (the Create's pod before).
        if await self._write(unit, lambda r: r is None, record,
                             broker=broker if unit.partition is not None else None):
            log.info("%s/%s: members %s, led by %s in epoch 1", self.namespace, unit.key,
                     list(record.members), record.leader)
            await self._directory(broker, unit.resource)

    async def _adopt(self, broker: BrokerModel, members: Members, unit: Unit,
                     record: Replication) -> None:
        """A stream of one copy made a one-member replicated stream: its record (epoch 1, its
        pod leading, the only member) written first, then that pod assigned so. An Assign
        that fails is made again by the next tick (the stream is not assigned yet)."""
        if not await self._write(unit, lambda r: r is None, record):
            return
        leader = record.leader
        assert leader is not None
        log.info("%s/%s: one copy on pod %d, now its leader in epoch 1 (members [%d])",
                 self.namespace, unit.key, leader, leader)
        if await members.assign(leader, unit.stream, 1, Role.LEADER, leader, [leader]):
            self.assigned.add(unit.key)
        await self._directory(broker, unit.resource)

    # --- an election --------------------------------------------------------------------------

    async def elect(self, broker: BrokerModel, members: Members, obj: dict[str, Any],
                    record: Replication, up: set[int], preferred: int | None = None,
                    draining: frozenset[int] = frozenset(),
                    rule: Callable[[dict[int, Tail | None]], Decision] | None = None,
                    unit: Unit | None = None) -> bool:
        """Elect ``obj``'s leader in ``record.epoch + 1``; ``preferred``: forced (the
        annotation), that member preferred; ``draining``: members on pods being deleted;
        ``rule``: the decision from the fence answers, instead (a planned transfer's);
        ``unit``: which of a super stream's partitions (None: a single stream). False when
        another writer reserved first."""
        unit = unit or failover.units(obj)[0]
        name, key, stream = obj["metadata"]["name"], unit.key, unit.stream
        forced = preferred is not None

        async def reserve(epoch: int) -> bool:
            electing = replace(record, epoch=epoch, leader=None, in_sync=(),
                               phase=failover.ELECTING, reason="Electing")
            if not await self._write(unit, lambda r: r is not None and r.epoch == record.epoch,
                                     electing):
                return False
            await self._directory(broker, name)  # Metadata: no leader while electing
            return True

        def decide(answers: dict[int, Tail | None]) -> Decision:
            return failover.choose(record, answers, draining=draining, preferred=preferred,
                                   force=forced)

        outcome = await run_election(stream, record.members, record.epoch, reserve, members,
                                     reachable=up, decide=rule or decide)
        if outcome.lost:
            log.info("%s/%s: epoch %d was reserved by another writer", self.namespace, key,
                     outcome.epoch)
            return False
        decision = outcome.decision
        leader = None if outcome.leader == NO_LEADER else outcome.leader
        # decision None: a majority of the members no longer has the stream
        reason = "StreamGone" if decision is None else decision.reason.value
        phase = failover.ELECTING if leader is not None else failover.UNAVAILABLE
        after = replace(record, epoch=outcome.epoch, leader=leader, in_sync=(), phase=phase,
                        reason=reason)
        unclean = decision is not None and decision.unclean and leader is not None
        await self._write(unit, lambda r: r is not None and r.epoch == outcome.epoch, after,
                          broker=broker, unclean=unclean)
        metrics.ELECTIONS.labels(self.namespace, broker.name, reason).inc()
        await self._directory(broker, name)
        if leader is None:
            return True
        self.assigned.add(key)
        self.away -= set(outcome.assigned)
        pod = names.pod(broker.name, leader)
        which = f"{unit.partition}: " if unit.partition is not None else ""
        if unclean:
            fenced = list(decision.fenced) if decision else []
            await self._event(obj, "Warning", failover.UNCLEAN_ELECTION,
                              f"{which}{pod} elected in epoch {outcome.epoch} without a"
                              f" majority of the members (fenced: {fenced}): messages"
                              " confirmed by the others may be lost")
        else:
            await self._event(obj, "Normal", LEADER_ELECTED,
                              f"{which}{pod} leads epoch {outcome.epoch} ({reason})")
        if forced:
            await self._unannotate(name, unit.partition if unit is not None else None)
        return True

    async def _reassign(self, members: Members, unit: Unit, record: Replication,
                        returning: list[int]) -> None:
        """Assign members their role in the current epoch again (idempotent on the broker)."""
        assert record.leader is not None
        stream = unit.stream
        done = True
        for m in sorted(returning, key=lambda m: m != record.leader):  # the leader first
            role = Role.LEADER if m == record.leader else Role.FOLLOWER
            done = await members.assign(m, stream, record.epoch, role, record.leader,
                                        record.members) and done
        if done:
            self.assigned.add(unit.key)

    # --- member set changes -------------------------------------------------------------------

    def _change_facts(self, broker: BrokerModel, streams: list[dict[str, Any]],
                      pods: dict[int, dict[str, Any]], up: set[int], drained: frozenset[int],
                      probed: set[int]) -> None:
        """What this tick's member set changes go by: the pods (a scale-down's removed ones
        draining; ready when they answer, are Ready, are not drained nor being deleted), the
        members lost (unready for the Broker's replaceAfter) and the members each pod holds."""
        ordinals = probed | set(range(broker.replicas)) | set(pods)
        bad = failover.unready(ordinals, up, {o: _ready(p) for o, p in pods.items()})
        now = time.monotonic()
        for o in set(self.unready_since) | ordinals:
            if o in bad:
                self.unready_since.setdefault(o, now)
            else:  # ready, or no longer a pod of the Broker (a pod made again starts afresh)
                self.unready_since.pop(o, None)
        self.lost = lost_since(self.unready_since, now, broker.replace_after)
        deleting = {o for o, p in pods.items() if p["metadata"].get("deletionTimestamp")}
        zones = {o: z for o, z in self.pod_zones.items() if z is not None}
        self.change_pods = failover.change_pods(ordinals, up, bad, drained | deleting,
                                                broker.replicas, zones)
        self.load = Load.holding(_members_of(s, unit) for s in streams
                                 for unit in failover.units(s))

    async def _change(self, broker: BrokerModel, members: Members, obj: dict[str, Any],
                      unit: Unit, record: Replication, up: set[int]) -> None:
        """The stream's member set change: the next step of the one in progress, else the
        next change toward its replicas (membership.next_change) when one may start; and
        former members told again to drop their copy."""
        if record.leaving:
            record = await self._leave(members, unit, record, up)
        if record.leader is None:
            return
        if record.changing is None:
            if record.phase != failover.READY:
                return
            desired = int(((obj.get("status") or {}).get("applied") or {}).get("replicas") or 1)
            nxt = next_change(desired, record.members, record.leader, self.change_pods,
                              self.load, self.lost)
            change = nxt.change
            if change is None:
                if len(record.members) != desired or self.lost & set(record.members):
                    self._held(unit.key, f"no member set change: {nxt.why}")
                return
            why = change_refusal(record.members, record.leader, record.in_sync, change)
            if why is not None and not (change.kind is Kind.REMOVE
                                        and change.member == record.leader):
                self._held(unit.key, f"{change} waits: {why}")
                return
            self.held.pop(unit.key, None)
            removed = {p.ordinal for p in self.change_pods if p.draining}
            started = datetime.now(UTC).strftime(TIME_FORMAT)
            after = replace(record, changing=failover.start_change(
                change, record.members, self.lost, removed, started, nxt.why))
            if not await self._write(unit, lambda r: r is not None and r.epoch == record.epoch
                                     and r.changing is None, after, broker=broker):
                return
            log.info("%s/%s: %s (%s)", self.namespace, unit.key, change, nxt.why)
            record = after
        await self._change_step(broker, members, obj, unit, record, up)

    def _held(self, key: str, why: str) -> None:
        """Log why a stream's change cannot start, once while the reason stays the same."""
        if self.held.get(key) != why:
            self.held[key] = why
            log.info("%s/%s: %s", self.namespace, key, why)

    async def _change_step(self, broker: BrokerModel, members: Members, obj: dict[str, Any],
                           unit: Unit, record: Replication, up: set[int]) -> None:
        """One step of the change in progress (membership.change_step): make the learner,
        wait for it, join the next epoch with the new set, transfer a leader to remove, or
        give the change up."""
        changing, leader = record.changing, record.leader
        assert changing is not None and leader is not None
        change, stream, key = changing.change, unit.stream, unit.key
        adding = change.kind is Kind.ADD
        learner = await members.contact(change.member, stream) if adding else None
        ours = await members.contact(leader, stream) if adding else None
        mark = (key, change.member)
        now_tail = ours.tail.chunk_id if ours is not None and ours.tail is not None else None
        target = self.targets.get(mark, now_tail if now_tail is not None else 2 ** 62)
        if now_tail is not None:
            self.targets[mark] = now_tail
        started = datetime.strptime(changing.started, TIME_FORMAT).replace(tzinfo=UTC)
        waited = (datetime.now(UTC) - started).total_seconds()
        step = change_step(change, record.epoch, record.members, leader, record.in_sync,
                           learner, target, waited, failover.CHANGE_TIMEOUT_S)
        if adding and change.member in self.lost:
            step = replace(step, action=Action.ABORT,
                           why=f"member {change.member}'s pod is lost")
        if step.action is not Action.JOIN and step.action.value != changing.step:
            moved = replace(record, changing=replace(changing, step=step.action.value))
            if step.action is not Action.ABORT and await self._write(
                    unit, lambda r: r is not None and r.epoch == record.epoch
                    and r.changing == changing, moved, broker=broker):
                record, changing = moved, moved.changing
        if step.action is Action.LEARN:
            await members.learn(leader, stream, record.epoch, change.member)
        elif step.action is Action.TRANSFER:
            assert step.to is not None
            await self.transfer(broker, members, obj, step.to, up, unit=unit)
        elif step.action is Action.ABORT:
            await self._abort(broker, obj, members, unit, record, step.why)
        elif step.action is Action.JOIN:
            await self._join(broker, members, obj, unit, record, up)
        else:
            log.debug("%s/%s: %s: %s", self.namespace, key, change, step.why)

    async def _join(self, broker: BrokerModel, members: Members, obj: dict[str, Any],
                    unit: Unit, record: Replication, up: set[int]) -> None:
        """The next epoch with the new member set: recorded first (the change cleared), then
        assigned (the leader kept); a removed member is then told to drop its copy."""
        changing, leader = record.changing, record.leader
        assert changing is not None and leader is not None
        change, key = changing.change, unit.key
        adding = change.kind is Kind.ADD
        new = change.apply(record.members)
        in_sync = tuple(sorted((set(record.in_sync) & set(new)) | (
            {change.member} if adding else set())))
        leaving = tuple(sorted((set(record.leaving) | (set() if adding else {change.member}))
                               - set(new)))
        reason = MEMBER_ADDED if adding else MEMBER_REMOVED

        async def reserve(epoch: int) -> bool:
            after = replace(record, epoch=epoch, members=new, in_sync=in_sync,
                            reason=reason, changing=None, leaving=leaving)
            after = replace(after, phase=failover.phase_of(after, in_sync))
            return await self._write(unit, lambda r: r is not None and r.epoch == record.epoch
                                     and r.changing == changing, after, broker=broker)

        outcome = await join(unit.stream, new, record.epoch, leader, reserve, members,
                             reachable=up)
        if outcome.lost:
            return
        self.targets.pop((key, change.member), None)
        if len(outcome.assigned) < len([m for m in new if m in up]):
            self.assigned.discard(key)  # the next tick assigns every member again
        await self._directory(broker, unit.resource)
        which = f"{unit.partition}: " if unit.partition is not None else ""
        pod = names.pod(broker.name, change.member)
        now = f"members {[names.pod(broker.name, m) for m in new]} from epoch {outcome.epoch}"
        metrics.MEMBERSHIP_CHANGES.labels(self.namespace, broker.name, change.kind.value).inc()
        if adding:
            await self._event(obj, "Normal", MEMBER_ADDED, f"{which}{pod} added: {now}")
        else:
            await self._event(obj, "Normal", MEMBER_REMOVED, f"{which}{pod} removed: {now}")
            if changing.replaces:
                metrics.MEMBER_REPLACEMENTS.labels(self.namespace, broker.name).inc()
                await self._event(obj, "Normal", MEMBER_REPLACED,
                                  f"{which}{pod} replaced ({changing.reason}): {now}")
            fresh = failover.record_of(
                ((await self.runtime.kube.get("Stream", self.namespace, unit.resource))
                 or {}).get("status"), unit)
            if fresh is not None and fresh.epoch == outcome.epoch:
                await self._leave(members, unit, fresh, up | {change.member})

    async def _abort(self, broker: BrokerModel, obj: dict[str, Any], members: Members,
                     unit: Unit, record: Replication, why: str) -> None:
        """Give the change up: an added member's learner is told to drop its copy."""
        changing = record.changing
        assert changing is not None
        member = changing.member
        gone = changing.kind is Kind.REMOVE or await members.leave(member, unit.stream,
                                                                   record.epoch)
        leaving = record.leaving if gone else tuple(sorted({*record.leaving, member}))
        after = replace(record, changing=None, leaving=leaving)
        if await self._write(unit, lambda r: r is not None and r.epoch == record.epoch
                             and r.changing == changing, after, broker=broker):
            self.targets.pop((unit.key, member), None)
            which = f"{unit.partition}: " if unit.partition is not None else ""
            await self._event(obj, "Warning", MEMBER_CHANGE_ABORTED,
                              f"{which}{changing.change} given up: {why}")

    async def _leave(self, members: Members, unit: Unit, record: Replication,
                     up: set[int]) -> Replication:
        """Tell the former members in ``record.leaving`` that answer probes to drop their copy;
        those that did (or are members again) leave the list. The record as it is then."""
        kept = []
        for m in record.leaving:
            if m in record.members:
                continue
            if m not in up or not await members.leave(m, unit.stream, record.epoch):
                kept.append(m)
        if tuple(kept) == record.leaving:
            return record
        after = replace(record, leaving=tuple(kept))
        if await self._write(unit, lambda r: r is not None and r.epoch == record.epoch
                             and r.leaving == record.leaving, after):
            return after
        return record

    # --- what the members say -----------------------------------------------------------------

    async def _observe(self, broker: BrokerModel, obj: dict[str, Any], unit: Unit,
                       record: Replication, up: set[int]) -> Replication:
        """Who is in sync now, the phase, the conditions: written when they change; the
        record as it is then."""
        assert record.leader is not None
        stream, key = unit.stream, unit.key
        committed = await self._stat(broker, record.leader, stream, "committed_offset") \
            if record.leader in up else None
        if committed is None:
            synced: tuple[int, ...] = ()
        else:
            # In sync: holding what the leader had committed a look earlier, so a follower
            # a moment behind a busy leader is not counted out (and the status not rewritten)
            # at every tick.
            epoch, before = self.committed.get(key, (record.epoch, committed))
            self.committed[key] = (record.epoch, committed)
            mark = min(before, committed) if epoch == record.epoch else committed
            tails = {m: (await self._stat(broker, m, stream, "last_offset") if m in up else None)
                     for m in record.followers}
            synced = failover.in_sync(record.leader, mark, tails)
        self.seen[key] = rolling.StreamState(key, record.members, record.leader,
                                             frozenset(synced))
        after = failover.with_phase(record, synced)
        status = obj.get("status") or {}
        current = list(status.get("conditions") or [])
        if after != record or _conditioned(current, after, broker, status, unit) != current:
            await self._write(unit, lambda r: r is not None and r.epoch == record.epoch, after,
                              broker=broker)
        return after

    async def _stat(self, broker: BrokerModel, pod: int, stream: str, key: str) -> int | None:
        try:
            async with self._session(broker, pod) as session:
                stats = await session.stream_stats(stream)
        except Exception as e:
            log.debug("%s: pod %d: %s", stream, pod, e)
            return None
        return int(getattr(stats, key))

    # --- writes ---------------------------------------------------------------------------------

    async def _write(self, unit: Unit, expect: Callable[[Replication | None], bool],
                     record: Replication, *, broker: BrokerModel | None = None,
                     unclean: bool = False) -> bool:
        """Write ``status.replication`` if the record read now passes ``expect``: a
        compare-and-swap, the patch carrying the resourceVersion read (409: re-read, check,
        retry). With ``broker``, the conditions too, and the placement and leader fields
        when there is a leader (the Stream reconciler and the directory follow them). A
        super stream's partition: its own entry, its own placement entry (``leader``: the
        first partition's), the conditions summarising every partition."""
        name = unit.resource
        for _ in range(CAS_ATTEMPTS):
            obj = await self.runtime.kube.get("Stream", self.namespace, name)
            if obj is None or not expect(failover.record_of(obj.get("status"), unit)):
                return False
            read = obj.get("status") or {}
            status: dict[str, Any] = failover.record_patch(unit, record)
            if broker is not None:
                status["conditions"] = _conditioned(
                    list(read.get("conditions") or []), record, broker, read, unit, unclean)
                if record.leader is not None:
                    pod = names.pod(broker.name, record.leader)
                    placed = read["placement"]
                    mine = [unit.partition is None or p["stream"] == unit.partition
                            for p in placed]
                    if mine[0]:
                        status["leader"] = pod
                    status["placement"] = [
                        {"stream": p["stream"], "pod": pod, "ordinal": record.leader} if m
                        else dict(p) for p, m in zip(placed, mine, strict=True)]
            patch = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                     "status": status}
            try:
                await self.runtime.kube.patch("Stream", self.namespace, name, patch,
                                              subresource="status")
                return True
            except ApiError as e:
                if e.status != 409:
                    raise
        return False

    async def _directory(self, broker: BrokerModel, name: str) -> None:
        """The directory ConfigMap from the Streams' status as now written (best effort: the
        Broker's timer writes it again)."""
        obj = await self.runtime.kube.get("Stream", self.namespace, name)
        placed = Placed.from_status((obj or {}).get("status") or {})
        try:
            await sync_directory(self.runtime, broker, {name: placed} if placed else None)
        except Exception as e:
            log.warning("%s/%s: stream directory not updated: %s", self.namespace, name, e)

    async def _unannotate(self, name: str, partition: str | None = None) -> None:
        """Remove the force-leader annotation, or only ``partition``'s entry of it: read again
        first, since the partitions of one tick are forced one after another."""
        fresh = await self.runtime.kube.get("Stream", self.namespace, name) or {}
        value = (fresh.get("metadata", {}).get("annotations") or {}).get(failover.FORCE_LEADER)
        await self.runtime.kube.patch("Stream", self.namespace, name, {
            "metadata": {"annotations": {
                failover.FORCE_LEADER: failover.force_rest(value, partition)}}})

    async def _event(self, obj: dict[str, Any], kind: str, reason: str, message: str,
                     involved: str = "Stream") -> None:
        meta = obj["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            await self.runtime.kube.create({
                "apiVersion": "v1", "kind": "Event", "type": kind, "reason": reason,
                "message": message,
                "metadata": {"namespace": self.namespace, "generateName": f"{meta['name']}."},
                "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": involved,
                                   "name": meta["name"], "namespace": self.namespace,
                                   "uid": meta.get("uid", "")},
                "source": {"component": "streamlet-operator"},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            })
        except ApiError as e:
            log.warning("%s/%s: event %s not posted: %s", self.namespace, meta["name"], reason, e)

    def _session(self, broker: BrokerModel, pod: int) -> Any:
        return _PodSession(self.runtime, broker, pod)

    # --- leaderships: preferred leaders, a rebalance ------------------------------------------

    async def _leaderships(self, body: dict[str, Any], broker: BrokerModel,
                           members: Members | None, streams: list[dict[str, Any]],
                           pods: dict[int, dict[str, Any]], up: set[int] | None,
                           drained: frozenset[int] = frozenset()) -> None:
        """Each stream's preferred leader recorded; then the rebalance the Broker's
        annotation asks for (placement.REBALANCE, removed once done), or each leadership back
        to its preferred leader (spec.replication.restorePreferredLeader): the planned
        transfers placement.leadership_moves gives, one after another. Nothing moves while
        the pods are rolled or one is being deleted (the annotation waits)."""
        by_key = _units(streams)
        preferred = await self._preferred(by_key)
        asked = placement.REBALANCE in _annotations(body)
        if not asked and not broker.restore_preferred_leader:
            return
        if members is None or up is None:  # no replicated stream: nothing to move
            if asked:
                await self._rebalanced(body, [], [])
            return
        if any(pod["metadata"].get("deletionTimestamp") for pod in pods.values()):
            return
        allowed = [p.ordinal for p in placement.member_pods(pods, {}, broker.replicas, drained,
                                                             up) if p.ready and not p.draining]
        led = {key: Led(s.leader, s.members, s.in_sync) for key, s in self.seen.items()
               if s.leader is not None and s.in_sync is not None and key in by_key
               and not _changing(*by_key[key])}
        loop = asyncio.get_running_loop()
        now = loop.time()
        for key, s in led.items():  # since when each preferred leader is in sync, not leading
            if key in preferred and preferred[key] != s.leader and preferred[key] in s.in_sync:
                self.synced_since.setdefault(key, now)
            else:
                self.synced_since.pop(key, None)
        moves = [(key, target) for key, target in placement.leadership_moves(
            led, allowed, preferred, rebalance=asked, restore=broker.restore_preferred_leader)
            if asked or (now >= self.restore_after.get(key, 0.0)
                         and now - self.synced_since.get(key, now) >= RESTORE_SETTLE_S)]
        if not moves and not asked:
            return
        # Read again: this tick's roll step may have started a roll.
        fresh = await self.runtime.kube.get("Broker", self.namespace, self.broker_name)
        rolling_now = get_condition(((fresh or {}).get("status") or {}).get("conditions"),
                                    rolling.ROLLING)
        if (rolling_now or {}).get("status") == "True":
            return
        done: list[tuple[str, int]] = []
        failed: list[tuple[str, int]] = []
        for key, target in moves:  # (a transfer back failed lately: not a seal every tick)
            obj, unit = by_key[key]
            log.info("%s/%s: %s: moving the leadership to pod %d", self.namespace, key,
                     "rebalance" if asked else "preferred leader", target)
            try:
                ok = await self.transfer(broker, members, obj, target, up, unit=unit)
            except Exception:
                log.exception("%s/%s: transfer to pod %d failed", self.namespace, key, target)
                ok = False
            if ok:
                done.append((key, target))
            else:
                failed.append((key, target))
                self.restore_after[key] = loop.time() + RESTORE_BACKOFF_S
        if asked:
            # The balanced leaders are the ones to come back to from now on.
            leaders = {key: s.leader for key, s in led.items()} | dict(done)
            for key, leader in sorted(leaders.items()):
                if preferred.get(key) != leader:
                    await self._prefer(by_key[key][1], leader)
            await self._rebalanced(fresh or body, done, failed)

    async def _preferred(self, by_key: dict[str, tuple[dict[str, Any], Unit]]
                         ) -> dict[str, int]:
        """Each discovered stream's preferred leader (``preferredLeader`` in its record),
        recorded at the first look for a stream that has none (placement.preferred_leaders)."""
        recorded: dict[str, int] = {}
        missing: dict[str, tuple[int | None, int | None]] = {}
        for key, (obj, unit) in by_key.items():
            doc = _record_doc(obj, unit)
            if not doc:
                continue
            if doc.get("preferredLeader") is not None:
                recorded[key] = int(doc["preferredLeader"])
            else:
                leader = doc.get("leader")
                missing[key] = (None, None if leader is None else int(leader))
        for key, leader in placement.preferred_leaders(missing).items():
            await self._prefer(by_key[key][1], leader)
            recorded[key] = leader
        return recorded

    async def _prefer(self, unit: Unit, leader: int) -> None:
        """Write ``leader`` as the unit's preferred leader (a merge patch of that field alone:
        the record's compare-and-swap writes keep it)."""
        field = ({"replication": {"preferredLeader": leader}} if unit.partition is None else
                 {failover.PARTITIONS_FIELD: {unit.partition: {"preferredLeader": leader}}})
        try:
            await self.runtime.kube.patch("Stream", self.namespace, unit.resource,
                                          {"status": field}, subresource="status")
        except ApiError as e:
            log.warning("%s/%s: preferred leader not recorded: %s", self.namespace, unit.key, e)

    async def _rebalanced(self, body: dict[str, Any], done: list[tuple[str, int]],
                          failed: list[tuple[str, int]]) -> None:
        """The rebalance annotation removed, and an Event saying what moved."""
        await self.runtime.kube.patch("Broker", self.namespace, self.broker_name,
                                      {"metadata": {"annotations": {placement.REBALANCE: None}}})
        moved = ", ".join(f"{key} to {names.pod(self.broker_name, o)}" for key, o in done)
        message = (f"{len(done)} leaderships moved ({moved})" if done
                   else "the leaders were balanced already")
        if failed:
            message += "; not moved (the member did not catch up): " + ", ".join(
                f"{key} to {names.pod(self.broker_name, o)}" for key, o in failed)
        await self._event(body, "Warning" if failed else "Normal", REBALANCED, message,
                          involved="Broker")

    # --- zones ------------------------------------------------------------------------------------

    async def _publish_zones(self, broker: BrokerModel) -> None:
        """The pods' zones into the stream directory when they changed (a replicated Create
        places its members over them)."""
        key = (self.namespace, self.broker_name)
        known = {o: z for o, z in self.pod_zones.items() if z is not None}
        if self.runtime.pod_zones.get(key, {}) != known:
            self.runtime.pod_zones[key] = known
            await sync_directory(self.runtime, broker)

    async def zones(self, pods: dict[int, dict[str, Any]]) -> dict[int, str | None]:
        """Each pod's zone: the topology.kubernetes.io/zone label of the Node it runs on
        (placement.pod_zones), each Node read again after NODE_TTL_S. A Node that cannot be
        read (no permission, gone) gives none."""
        now = asyncio.get_running_loop().time()
        for name in sorted({str((p.get("spec") or {}).get("nodeName") or "")
                            for p in pods.values()} - {""}):
            if now < self.nodes.get(name, (0.0, None))[0]:
                continue
            try:
                node = await self.runtime.kube.get("Node", "", name)
            except ApiError as e:
                log.debug("%s/%s: node %s not read (no zone): %s", self.namespace,
                          self.broker_name, name, e)
                node = None
            self.nodes[name] = (now + NODE_TTL_S, node)
        return placement.pod_zones(pods, {n: node for n, (_, node) in self.nodes.items()
                                          if node is not None})


class _Members(Members):
    """Members whose address may be unknown (a resolver that raises for a pod not running):
    such a member is unreachable, as one that does not answer."""

    async def request(self, member: int, make: Any, probe: bool = False,
                      timeout: float = REQUEST_TIMEOUT_S) -> Any:
        try:
            self.address(member)
        except BrokerUnavailable:
            return None
        return await super().request(member, make, probe, timeout)


async def _plain(members: Members, member: int, name: str) -> bool:
    """Whether the member holds ``name`` without member state (a stream of one copy): its
    ReplicaContact refused with PRECONDITION_FAILED (unanswered: not known)."""
    return await members.contact_or_refusal(member, name) == Code.PRECONDITION_FAILED


class _PodSession:
    """runtime.admin's pooled session to one pod, credentials and address resolved on entry."""

    def __init__(self, runtime: Runtime, broker: BrokerModel, pod: int) -> None:
        self.runtime, self.broker, self.pod = runtime, broker, pod
        self._cm: Any = None

    async def __aenter__(self) -> Any:
        address, tls = await self.runtime.broker_address(self.broker, self.pod)
        user, password = await self.runtime.broker_credentials(self.broker.namespace,
                                                               self.broker.name)
        self._cm = self.runtime.admin.session(address, user, password, tls)
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._cm.__aexit__(*exc)


def _record_doc(obj: dict[str, Any], unit: Unit) -> dict[str, Any]:
    """The unit's record in ``obj``'s status as written ({} until discovered)."""
    status = obj.get("status") or {}
    if unit.partition is None:
        return dict(status.get("replication") or {})
    return dict((status.get(failover.PARTITIONS_FIELD) or {}).get(unit.partition) or {})


def _changing(obj: dict[str, Any], unit: Unit) -> bool:
    """Whether a member set change of the unit is under way (its leadership stays put)."""
    return bool(_record_doc(obj, unit).get("changing"))


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _members_of(obj: dict[str, Any], unit: Unit) -> list[int]:
    record = failover.record_of(obj.get("status"), unit)
    return list(record.members) if record else []


def _conditioned(current: list[dict[str, Any]], record: Replication, broker: BrokerModel,
                 status: dict[str, Any] | None = None, unit: Unit | None = None,
                 unclean: bool = False) -> list[dict[str, Any]]:
    """``current`` with the replication conditions the record gives (and UncleanElection set
    by an unclean election, cleared by the next clean one, of a super stream once no
    partition's last election was unclean). A super stream's partition
    (``unit``): the conditions summarise every partition, ``record`` over its own entry in
    ``status``."""
    pod = names.pod(broker.name, record.leader) if record.leader is not None else ""
    result = current
    elsewhere: list[str] = []
    if unit is None or unit.partition is None:
        wanted = failover.conditions(record, pod)
        which = ""
        changing = failover.changing_condition({"": record})
    else:
        records = {u.partition or u.stream: (record if u == unit
                                             else failover.record_of(status, u))
                   for u in failover.units({"metadata": {"name": unit.resource},
                                            "status": status or {}})}
        wanted = failover.summarise(records, lambda o: names.pod(broker.name, o))
        which = f"{unit.partition}: "
        elsewhere = failover.unclean_elsewhere(records, unit.partition)
        changing = failover.changing_condition(records)
    for type_, value, reason, message in wanted:
        result = set_condition(result, type_, value, reason, message)
    if changing[1] or get_condition(result, failover.MEMBERS_CHANGING) is not None:
        result = set_condition(result, *changing)  # absent until a first change
    if unclean:
        result = set_condition(result, failover.UNCLEAN_ELECTION, True, "UncleanElection",
                               f"{which}{pod} elected in epoch {record.epoch} without a"
                               " majority of the members: messages they confirmed may be lost")
    elif record.reason == "Elected" and not elsewhere and any(
            c.get("type") == failover.UNCLEAN_ELECTION for c in result):
        result = set_condition(result, failover.UNCLEAN_ELECTION, False, "Elected",
                               f"{which}a clean election in epoch {record.epoch}")
    return result

