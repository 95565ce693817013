"""Single-active-consumer groups of a replicated stream, decided at its leader (real brokers on
loopback, docs/replication.md): consumers of one group subscribed on different members, one
active at a time; a hand-over when the active one goes; a partitioned group; a leader change."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streamlet.client import Client, connect
from streamlet.client.consumer import Consumer
from streamlet.rabbitmq import Code
from streamlet.rabbitmq.constants import Role
from streamlet.rabbitmq.frames import replication as rf
from tests.broker.test_replication import Factory, _admin, _members, _stream_on_members, assign
from tests.cluster.test_failover import _create_replicated, _led, _led_after
from tests.cluster.test_local_cluster import HOST, Cluster
from tests.support.brokers import BrokerProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

SAC = {"single-active-consumer": "true"}
CLOSED = "closed"  # a consumer's client closed: it is not active any more


Timeline = list[tuple[float, object, object]]  # (when, the Consumer, True/False or an offset)


@pytest.fixture
def timeline(monkeypatch: pytest.MonkeyPatch) -> Timeline:
    """Every ConsumerUpdate a consumer of this test gets, in the order this process saw them
    (recorded before the client answers: an update may come before ``consumer()`` returns)."""
    events: Timeline = []
    answer = Consumer._on_consumer_update

    def on_update(self: Consumer, correlation_id: int, active: bool) -> None:
        events.append((time.monotonic(), self, active))
        answer(self, correlation_id, active)

    monkeypatch.setattr(Consumer, "_on_consumer_update", on_update)
    return events


@dataclass
class Watched:
    """A consumer of a group, and what it was sent."""

    who: str
    client: Client
    consumer: Consumer
    timeline: Timeline
    got: list[int] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    @property
    def updates(self) -> list[bool]:
        return [e for _, c, e in self.timeline if c is self.consumer and isinstance(e, bool)]

    @property
    def activated(self) -> int:
        return self.updates.count(True)

    @property
    def active(self) -> bool:
        return bool(self.updates) and self.updates[-1]

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()  # it handles nothing more from here on
        self.timeline.append((time.monotonic(), self.consumer, CLOSED))
        with contextlib.suppress(Exception):
            await self.client.close()


async def watch(who: str, broker: BrokerProcess | int, stream: str, timeline: Timeline,
                group: str = "grp", props: dict[str, str] | None = None) -> Watched:
    """``broker``: a process, or the port of a `streamlet cluster` node."""
    client = await (connect(HOST, broker) if isinstance(broker, int)
                    else connect(broker.host, broker.port))
    consumer = await client.consumer(stream, "first", name=group,
                                     properties={**SAC, **(props or {})})
    w = Watched(who, client, consumer, timeline)

    async def read() -> None:
        async for m in consumer:
            w.got.append(m.offset)
            timeline.append((time.monotonic(), consumer, m.offset))

    w.task = asyncio.get_running_loop().create_task(read())
    return w


def no_overlap(timeline: Timeline) -> None:
    """At most one consumer is active at any point of the timeline, and each message came to
    a consumer while it was the active one."""
    active: object = None
    for _, who, event in timeline:
        if event is True:
            assert active in (None, who), f"{who} activated while {active} was active"
            active = who
        elif event is False or event == CLOSED:
            if active is who:
                active = None
        else:
            assert active is who, f"{who} got offset {event} while {active} was the active one"


async def publish(broker: BrokerProcess | int, stream: str, bodies: list[bytes]) -> None:
    async with await (connect(HOST, broker) if isinstance(broker, int)
                      else connect(broker.host, broker.port)) as c:
        producer = await c.producer(stream)
        await producer.send_many(bodies)
        await asyncio.wait_for(producer.flush(), 60)


def _one_active(ws: list[Watched]) -> Watched | None:
    on = [w for w in ws if w.active]
    return on[0] if len(on) == 1 else None


async def test_one_consumer_of_a_group_on_three_members_is_active_and_hands_over(
        tmp_path: Path, broker_factory: Factory, timeline: Timeline) -> None:
    brokers = await _stream_on_members("s", tmp_path, broker_factory)
    await publish(brokers[0], "s", [b"m%d" % i for i in range(100)])
    # on two followers, then on the leader
    ws = [await watch(name, brokers[i], "s", timeline) for name, i in (("A", 1), ("B", 2), ("C", 0))]
    try:
        first = await eventually(lambda: _one_active(ws), timeout=30, what="one active")
        await eventually(lambda: len(first.got) == 100, timeout=30, what="it gets all 100")
        await publish(brokers[0], "s", [b"n%d" % i for i in range(20)])
        await eventually(lambda: len(first.got) == 120, timeout=30, what="and 20 more")
        assert sum(w.activated for w in ws) == 1, [(w.who, w.updates) for w in ws]
        assert all(w.got == [] for w in ws if w is not first), [(w.who, w.updates, w.got[:5], len(w.got)) for w in ws]
        base = first.got[0]  # after the epoch's opening chunk (offset 0), which consumers skip
        assert first.got == list(range(base, base + 120))

        # the active one stores its offset and goes: another member's consumer takes over
        await first.client.store_offset("grp", "s", first.got[-1])
        await eventually(lambda: first.client.query_offset("grp", "s"), timeout=30,
                         what="the offset stored")
        await first.close()
        ws.remove(first)
        second = await eventually(lambda: _one_active(ws), timeout=30, what="another active")
        await publish(brokers[0], "s", [b"o%d" % i for i in range(30)])
        await eventually(lambda: len(second.got) == 30, timeout=30, what="it resumes")
        # from the stored offset on (the StoreOffset's tracking chunk took an offset between)
        assert second.got == list(range(second.got[0], second.got[0] + 30))
        assert base + 120 <= second.got[0] <= base + 121, second.got
        (third,) = [w for w in ws if w is not second]
        assert third.got == [] and third.activated == 0
        no_overlap(timeline)
    finally:
        for w in ws:
            await w.close()


def _fence_and_assign(brokers: list[BrokerProcess], live: list[int], stream: str, epoch: int,
                      leader: int) -> None:
    """What the placement driver does after a leader is lost: fence the live members with a
    new epoch, then assign the leader, then its followers."""
    for i in live:
        assert _admin(brokers[i], rf.Fence(1, stream, epoch), rf.FenceResponse).code == Code.OK
    lead = brokers[leader]
    for i in [leader] + [i for i in live if i != leader]:
        role = Role.LEADER if i == leader else Role.FOLLOWER
        answer = _admin(brokers[i], rf.Assign(1, stream, epoch, role, lead.host, lead.port,
                                             list(range(len(brokers)))), rf.AssignResponse)
        assert answer.code == Code.OK, (i, answer)


async def test_a_lost_leader_stops_the_group_and_the_new_leader_decides_it_again(
        tmp_path: Path, broker_factory: Factory, timeline: Timeline) -> None:
    brokers = await _stream_on_members("s", tmp_path, broker_factory)
    await publish(brokers[0], "s", [b"m%d" % i for i in range(50)])
    a = await watch("A", brokers[1], "s", timeline)
    ws = [a]
    try:
        await eventually(lambda: a.active and len(a.got) == 50, timeout=30, what="A active")
        ws.append(await watch("B", brokers[2], "s", timeline))
        await a.client.store_offset("grp", "s", a.got[-1])
        await eventually(lambda: a.client.query_offset("grp", "s"), timeout=30,
                         what="the offset stored")

        brokers[0].kill()  # kill -9: the members' links to it close
        await eventually(lambda: not a.active, timeout=30, what="A stopped: no leader")
        assert ws[1].activated == 0, "B never active while nobody leads"

        _fence_and_assign(brokers, [1, 2], "s", 2, leader=1)
        on = await eventually(lambda: _one_active(ws), timeout=30, what="one active again")
        await publish(brokers[1], "s", [b"n%d" % i for i in range(30)])
        await eventually(lambda: len(on.got) >= 30 + (50 if on is a else 0), timeout=30,
                         what="the active one gets the new messages")
        assert sum(w.active for w in ws) == 1
        assert all(w.got == [] for w in ws if w is not on and w is not a)
        no_overlap(timeline)
    finally:
        for w in ws:
            await w.close()


async def test_a_partitioned_group_spreads_partitions_over_consumers_on_two_members(
        tmp_path: Path, broker_factory: Factory, timeline: Timeline) -> None:
    """RabbitMQ's rule, at each partition's leader: partition i's active consumer is the
    group's member i % n in order of arrival; the one moved away steps down first."""
    brokers = _members(tmp_path, broker_factory)
    parts = ["ss-0", "ss-1"]
    for b in brokers:  # each member knows the super stream (the partition index is its own)
        async with await connect(b.host, b.port) as c:
            await c.create_super_stream("ss", parts, ["0", "1"])
    for p in parts:
        assign(brokers, p, 1, leader=0)
    props = {"super-stream": "ss"}
    x = [await watch("X", brokers[1], p, timeline, props=props) for p in parts]
    try:
        await eventually(lambda: all(w.active for w in x), timeout=30, what="X alone: both")
        y = [await watch("Y", brokers[2], p, timeline, props=props) for p in parts]
        ws = x + y
        # partition 0: members [X, Y] -> X; partition 1: -> Y, once X stepped down
        await eventually(lambda: y[1].active and x[0].active and not x[1].active
                         and not y[0].active, timeout=30, what="the partitions spread")
        assert x[1].updates == [True, False] and y[0].updates == []
        for p in parts:
            await publish(brokers[0], p, [b"%s-%d" % (p.encode(), i) for i in range(10)])
        await eventually(lambda: len(x[0].got) == 10 and len(y[1].got) == 10, timeout=30,
                         what="each partition to its consumer")
        assert x[1].got == [] and y[0].got == []
        for i in range(2):
            no_overlap([e for e in timeline if e[1] in (x[i].consumer, y[i].consumer)])
    finally:
        for w in x + locals().get("y", []):
            await w.close()


async def test_through_a_leader_kill_under_the_cluster_driver_one_consumer_stays_active(
        tmp_path: Path, timeline: Timeline) -> None:
    """`streamlet cluster`: the leader's broker killed (kill -9; the supervisor restarts it),
    the driver fences and elects; afterwards exactly one consumer of the group is active, and
    no message ever went to two consumers at once."""
    cluster = Cluster(tmp_path / "c", 3).start()
    ws: list[Watched] = []
    try:
        ports = cluster.ports()
        _create_replicated(cluster, "s")
        epoch, leader = await eventually(lambda: _led(cluster, "s"), timeout=30,
                                         what="the driver's record")
        await publish(ports[leader], "s", [b"m%d" % i for i in range(100)])
        for who, node in (("A", 1), ("B", 2), ("C", 0)):  # C on the leader, killed with it
            ws.append(await watch(who, ports[node], "s", timeline))
            if who == "A":
                await eventually(lambda: ws[0].active, timeout=30, what="A active")
        await eventually(lambda: len(ws[0].got) == 100, timeout=30, what="A reads")
        await ws[0].client.store_offset("grp", "s", ws[0].got[-1])
        await eventually(lambda: ws[0].client.query_offset("grp", "s"), timeout=30,
                         what="the offset stored")

        os.kill(cluster.state()["nodes"][leader]["pid"], signal.SIGKILL)
        epoch, leader = await eventually(lambda: _led_after(cluster, "s", epoch, value=True),
                                         timeout=60, what="a leader in a later epoch")
        live = [w for w in ws if w.who != "C"]  # C's connection died with its broker
        on = await eventually(lambda: _one_active(live), timeout=60, what="one active again")
        before = len(on.got)
        await publish(ports[leader], "s", [b"n%d" % i for i in range(50)])
        await eventually(lambda: len(on.got) >= before + 50, timeout=60,
                         what="the active one gets the new messages")
        assert [w.who for w in live if w.active] == [on.who]
        assert all(w.got == [] for w in live if w.activated == 0)
        no_overlap(timeline)
    finally:
        for w in ws:
            await w.close()
        cluster.stop()


async def test_rstream_consumers_of_a_group_on_two_replicas(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rstream's single active consumers, each on its own replica (rstream reads from a
    replica): one receives; the other takes over from the stored offset when it goes."""
    import rstream.consumer
    from rstream import Consumer as RConsumer
    from rstream import (
        ConsumerOffsetSpecification,
        EventContext,
        OffsetSpecification,
        OffsetType,
    )

    picks = itertools.cycle([0, 1])  # A on the first replica, B on the second
    monkeypatch.setattr(rstream.consumer.random, "choice", lambda seq: seq[next(picks) % len(seq)])
    cluster = Cluster(tmp_path / "c", 3).start()
    consumers: dict[str, RConsumer] = {}
    try:
        ports = cluster.ports()
        _create_replicated(cluster, "r")
        _, leader = await eventually(lambda: _led(cluster, "r"), timeout=30, what="a leader")
        await publish(ports[leader], "r", [b"m%d" % i for i in range(60)])
        got: dict[str, list[bytes]] = {"A": [], "B": []}
        last: dict[str, int] = {}
        updates: list[tuple[str, bool]] = []

        def listener(who: str):  # type: ignore[no-untyped-def]
            async def on_update(is_active: bool, ctx: EventContext) -> OffsetSpecification:
                updates.append((who, is_active))
                stored = None
                with contextlib.suppress(Exception):  # no offset stored yet
                    stored = await ctx.consumer.query_offset("r", "billing")
                if stored is None:
                    return OffsetSpecification(OffsetType.FIRST, 0)
                return OffsetSpecification(OffsetType.OFFSET, stored + 1)
            return on_update

        def on_message(who: str):  # type: ignore[no-untyped-def]
            async def handle(msg: bytes, ctx) -> None:  # type: ignore[no-untyped-def]
                got[who].append(msg)
                last[who] = ctx.offset
            return handle

        for who in "AB":
            c = consumers[who] = RConsumer(HOST, ports[leader], username="guest",
                                           password="guest")
            await c.start()
            await c.subscribe("r", on_message(who), decoder=lambda x: x,
                              properties={**SAC, "name": "billing"},
                              subscriber_name="billing", consumer_update_listener=listener(who),
                              offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        first = await eventually(lambda: next((w for w in "AB" if len(got[w]) == 60), None),
                                 timeout=30, what="one consumer gets the 60")
        other = "B" if first == "A" else "A"
        await publish(ports[leader], "r", [b"n%d" % i for i in range(10)])
        await eventually(lambda: len(got[first]) == 70, timeout=30, what="and 10 more")
        assert got[other] == [] and updates == [(first, True)]

        await consumers[first].store_offset("r", "billing", last[first])
        await eventually(lambda: consumers[first].query_offset("r", "billing"), timeout=30,
                         what="the offset stored")
        await consumers.pop(first).close()
        await eventually(lambda: (other, True) in updates, timeout=30, what="the other active")
        await publish(ports[leader], "r", [b"o%d" % i for i in range(20)])
        await eventually(lambda: len(got[other]) == 20, timeout=30, what="it takes over")
        assert got[other] == [b"o%d" % i for i in range(20)], "from the stored offset on"
    finally:
        for c in consumers.values():
            with contextlib.suppress(Exception):
                await c.close()
        cluster.stop()


async def test_a_leader_kept_in_a_new_epoch_decides_its_groups_again(
        tmp_path: Path, broker_factory: Factory, timeline: Timeline) -> None:
    """Assign the same leader a later epoch (no fence): its own consumer and the followers'
    are all registered again, and the group goes on."""
    brokers = await _stream_on_members("s", tmp_path, broker_factory)
    await publish(brokers[0], "s", [b"m%d" % i for i in range(10)])
    a = await watch("A", brokers[1], "s", timeline)
    ws = [a]
    try:
        await eventually(lambda: a.active, timeout=30, what="A active")
        c = await watch("C", brokers[0], "s", timeline)  # on the leader
        ws.append(c)
        assign(brokers, "s", 2, leader=0)
        await eventually(lambda: _one_active(ws) and a.updates.count(False) >= 1, timeout=30,
                         what="the group decided again")
        await a.close()
        await eventually(lambda: c.active, timeout=30, what="C takes over")
        await publish(brokers[0], "s", [b"n%d" % i for i in range(10)])
        await eventually(lambda: len(c.got) >= 10, timeout=30, what="C reads")
        no_overlap(timeline)
    finally:
        for w in ws:
            await w.close()


async def test_a_stopped_leader_lets_its_members_consumers_lapse(
        tmp_path: Path, broker_factory: Factory, timeline: Timeline) -> None:
    """A leader that says nothing (SIGSTOP: its sockets stay open) stops being obeyed: the
    member stops its active consumer once its lease runs out, and nobody else is activated."""
    brokers = await _stream_on_members("s", tmp_path, broker_factory)
    a = await watch("A", brokers[1], "s", timeline)
    b = await watch("B", brokers[2], "s", timeline)
    try:
        on = await eventually(lambda: _one_active([a, b]), timeout=30, what="one active")
        assert brokers[0].proc is not None
        os.kill(brokers[0].proc.pid, signal.SIGSTOP)
        try:
            await eventually(lambda: not on.active, timeout=30, what="its lease runs out")
            assert not a.active and not b.active
        finally:
            os.kill(brokers[0].proc.pid, signal.SIGCONT)
        await eventually(lambda: _one_active([a, b]), timeout=30, what="one active again")
        no_overlap(timeline)
    finally:
        await a.close()
        await b.close()
