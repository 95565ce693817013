"""Network partitions during a member set change, in a local cluster behind fault proxies
(test_partition.py's ProxiedCluster: four brokers, a stream on members 0, 1 and 2, or on all
four for the removals, the placement driver ticked in-process). A member "cut off" is one whose proxies refuse: its peers'
links to it and the driver's requests fail (its own link to a leader of an older epoch, if it
keeps one, is refused by a leader of a later epoch). The change completes or is undone, and
never do two member sets hold a majority each: every epoch the driver records has one member
set, which every broker's saved member state of that epoch names; a named producer resending
what is not confirmed finds every confirmed message once, in order, on every final member."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.client.errors import StreamletError
from streamlet.cluster import driver as driver_module
from streamlet.cluster import requests
from streamlet.cluster.requests import Request
from streamlet.rabbitmq import Code
from streamlet.replication.model import NO_LEADER
from tests.cluster.test_failover import _record_confirms
from tests.cluster.test_partition import HOST, ProxiedCluster, _user_records
from tests.support.faultproxy import LoopThread
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

#: a send or a flush not done in this long: the producer connects again (to the leader the
#: driver records then) and resends what is not confirmed
STUCK_S = 3.0


class Producer:
    """A named producer ("app") publishing ids 1.. straight to the leader the driver records
    (not through a proxy: a cut-off leader keeps taking its publishes); when the record names
    another leader or a send or flush is stuck, it connects again and resends what is not
    confirmed with the same ids. After :meth:`finish`, until everything sent is confirmed."""

    def __init__(self, c: ProxiedCluster, name: str) -> None:
        self.c, self.name = c, name
        self.confirmed: set[int] = set()
        self.sent = 0
        self.rounds = 0  # connections made
        self.done = asyncio.Event()

    def finish(self) -> None:
        self.done.set()

    def leader(self) -> int:
        record = self.c.record(self.name)
        return NO_LEADER if record is None else record[1]

    async def run(self) -> None:
        while True:
            leader = self.leader()
            if leader == NO_LEADER:
                await asyncio.sleep(0.1)
                continue
            self.rounds += 1
            try:
                async with await connect(HOST, self.c.brokers[leader].port, timeout=5) as client:
                    producer = await client.producer(self.name, reference="app",
                                                     max_unconfirmed=200)
                    _record_confirms(producer, self.confirmed)
                    for i in range(1, self.sent + 1):  # the unconfirmed, again, with their ids
                        if i not in self.confirmed:
                            await asyncio.wait_for(producer.send(b"%d" % i, publishing_id=i),
                                                   STUCK_S)
                    while not self.done.is_set() and self.leader() == leader:
                        self.sent += 1
                        await asyncio.wait_for(producer.send(b"%d" % self.sent,
                                                             publishing_id=self.sent), STUCK_S)
                        if self.sent % 20 == 0:
                            await asyncio.sleep(0.02)
                    await asyncio.wait_for(producer.flush(), STUCK_S)
                    if self.done.is_set() and len(self.confirmed) >= self.sent:
                        return
            except (StreamletError, OSError, TimeoutError):
                await asyncio.sleep(0.1)  # fenced, cut off or gone: ask the record again

    async def at_least(self, more: int, timeout: float = 60) -> None:
        enough = len(self.confirmed) + more
        await eventually(lambda: len(self.confirmed) >= enough, timeout=timeout,
                         what=f"{enough} confirmed")


class Watch:
    """Checks, at every save of the driver's record and after every tick, that each epoch has
    one member set (the driver's record, read back from driver.json), that no broker's saved
    member state (replication.json) is of an epoch the driver did not record or names another
    set than the record's for that epoch, and that none is ahead of the record. What breaks
    is collected (raising on the driver's loop would only be logged)."""

    def __init__(self, c: ProxiedCluster, name: str) -> None:
        self.c, self.name = c, name
        self.sets: dict[int, list[int]] = {}  # epoch -> the member set recorded for it
        self.broken: list[str] = []
        self.ticks = 0
        self.states = 0  # brokers' saved states checked
        driver = c.driver
        save, tick = driver._save, driver.tick

        def saved() -> None:
            save()
            record = driver.records.get(name)
            if record is not None:
                self._recorded(record.epoch, list(record.members), "saved")

        async def ticked(alive: Any) -> None:
            await tick(alive)
            self.check()

        driver._save = saved  # type: ignore[method-assign]
        driver.tick = ticked  # type: ignore[method-assign]

    def _recorded(self, epoch: int, members: list[int], where: str) -> None:
        known = self.sets.setdefault(epoch, sorted(members))
        if known != sorted(members):
            self.broken.append(f"{where}: epoch {epoch} recorded with {members} and {known}")

    def check(self) -> None:
        self.ticks += 1
        try:
            doc = json.loads((self.c.root / "driver.json").read_text()).get(self.name)
        except (OSError, ValueError):
            return
        if doc is None:
            return
        self._recorded(doc["epoch"], doc["members"], "driver.json")
        for i, b in enumerate(self.c.brokers):
            path = b.data_dir / "streams" / self.name / "replication.json"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # no copy (yet, or dropped)
            epoch, members = state["epoch"], sorted(state["members"])
            self.states += 1
            if epoch > doc["epoch"]:
                self.broken.append(f"member {i} in epoch {epoch}, ahead of the record's "
                                   f"{doc['epoch']}")
            elif self.sets.get(epoch, members) != members:
                self.broken.append(f"member {i} holds {members} in epoch {epoch}, the record "
                                   f"{self.sets[epoch]}")
            elif epoch not in self.sets:
                self.broken.append(f"member {i} in epoch {epoch}, which the driver never "
                                   "recorded")


@pytest.fixture
def cluster4(tmp_path: Path) -> Iterator[ProxiedCluster]:
    with LoopThread() as bg:
        c = ProxiedCluster(tmp_path, bg, n=4)
        try:
            yield c
        finally:
            c.stop()


def _hook(c: ProxiedCluster, method: str, when: Callable[..., bool],
          then: Callable[[], None], calls: list[tuple[Any, ...]] | None = None) -> list[bool]:
    """``then()`` (on the driver's loop, at once) the first time the driver's
    ``brokers.<method>(...)`` is called with arguments ``when`` holds for; before the call when
    ``method`` is "assign", after it (once it answered) otherwise. The list: [True] once done.
    ``calls``: each call's arguments, appended."""
    brokers = c.driver.brokers
    original: Callable[..., Awaitable[Any]] = getattr(brokers, method)
    done: list[bool] = []

    async def hooked(*args: Any) -> Any:
        if calls is not None:
            calls.append(args)
        fire = not done and when(*args)
        if fire and method == "assign":
            done.append(True)
            then()
        answer = await original(*args)
        if fire and method != "assign":
            done.append(True)
            then()
        return answer

    setattr(brokers, method, hooked)
    return done


def _cut_now(c: ProxiedCluster, *cut: int) -> None:
    """Members ``cut`` cut off from their peers and the driver, from the proxies' loop (where
    the driver runs: ``ProxiedCluster.cut`` would wait on that loop)."""
    for i in cut:
        c.proxies[i].cut()
        c.driver_proxies[i].cut()


def _record(c: ProxiedCluster, name: str) -> dict[str, Any]:
    return dict(json.loads((c.root / "driver.json").read_text())[name])


def _settled(c: ProxiedCluster, name: str) -> dict[str, Any] | None:
    """The driver's record once no change is under way, nobody is left to drop a copy and every
    member holds the record's epoch in its role."""
    record = _record(c, name)
    if record["change"] is not None or record["leaving"] or record["leader"] == NO_LEADER:
        return None
    for m in record["members"]:
        state = c.member_state(m, name)
        role = "leader" if m == record["leader"] else "follower"
        if (state["epoch"], state["role"]) != (record["epoch"], role):
            return None
    return record


async def _finish(c: ProxiedCluster, name: str, producer: Producer, watch: Watch,
                  task: asyncio.Task[None]) -> list[int]:
    """Publishing ended, everything sent confirmed, the stream settled with identical segment
    files, then the cluster stopped: every final member's log holds ids 1..n once, in order, its
    segment and index files byte-identical to the others'. The final member set."""
    await producer.at_least(200)
    producer.finish()
    await asyncio.wait_for(task, 60)
    n = producer.sent
    assert producer.confirmed == set(range(1, n + 1)), "everything sent confirmed"
    record = await eventually(partial(_settled, c, name), timeout=60, what="the stream settled")
    members = record["members"]
    await eventually(lambda: c.identical(name, (".segment",), members), timeout=60,
                     what="the members' segment files byte-identical")
    c.stop()  # quiescence: index files are written out at the latest on close
    assert not watch.broken, watch.broken
    assert watch.ticks > 0 and watch.states > 0 and len(watch.sets) > 1, watch.sets
    assert c.identical(name, (".segment", ".index"), members), "segment and index identical"
    expected = [b"%d" % i for i in range(1, n + 1)]
    for m in members:
        assert _user_records(c.brokers[m].data_dir / "streams" / name) == expected, (
            f"member {m}: every confirmed message once, in order")
    return list(members)


async def _round(producer: Producer) -> None:
    """Until the producer, stuck, has connected again and resent, stuck again (a round)."""
    rounds = producer.rounds
    await eventually(lambda: producer.rounds >= rounds + 2, timeout=6 * STUCK_S,
                     what="the producer stuck, connecting again")


def _log_bytes(c: ProxiedCluster, node: int, name: str) -> int:
    """The bytes of ``name``'s segment files at ``node`` (0: no copy)."""
    d = c.brokers[node].data_dir / "streams" / name
    return sum(p.stat().st_size for p in d.glob("*.segment"))


def _add(c: ProxiedCluster, name: str, member: int) -> Path:
    return requests.write(c.root, Request(requests.MEMBERS, name, to=member,
                                          change="add"))


async def test_the_leader_cut_off_while_a_learner_catches_up(cluster4: ProxiedCluster) -> None:
    """Member 3 is added; the moment the leader (member 0) has made it a learner (before its
    copy caught up), the leader is cut off from its followers, the learner and the driver while
    its producer still publishes to it. The driver elects a new leader among the recorded set {0, 1, 2}; the change is
    carried on in the new epoch (the learner made again at the new leader) or given up. Healed,
    the old leader follows and the final set is {0, 1, 2} or {0, 1, 2, 3}."""
    c = cluster4
    c.create("p")
    watch = Watch(c, "p")
    learns: list[tuple[Any, ...]] = []  # (leader, name, epoch, member)
    at_cut: list[tuple[int, int]] = []  # the leader's and the learner's segment bytes

    def cut_leader() -> None:
        _cut_now(c, 0)
        at_cut.append((_log_bytes(c, 0, "p"), _log_bytes(c, 3, "p")))

    cut = _hook(c, "learn", lambda leader, name, epoch, member: member == 3, cut_leader,
                learns)
    c.drive()
    await eventually(lambda: c.record("p") == (1, 0), timeout=30, what="epoch 1 recorded")
    producer = Producer(c, "p")
    task = asyncio.create_task(producer.run())
    await producer.at_least(2000)
    _add(c, "p", 3)
    await eventually(lambda: cut, timeout=30, what="the learner made, the leader cut off")
    ((held, learnt),) = at_cut
    assert learnt < held, "the learner had not caught up when the leader was cut off"
    epoch, leader = await eventually(
        lambda: (r := c.record("p")) is not None and r[0] > 1 and r[1] in (1, 2) and r,
        timeout=60, what="a new leader among the recorded set")
    assert sorted(_record(c, "p")["members"]) == [0, 1, 2], "elected in the recorded set"
    assert c.member_state(0, "p")["epoch"] == 1, "the old leader never heard"
    await producer.at_least(1000)  # the new leader commits without it
    c.heal(0)
    members = await _finish(c, "p", producer, watch, task)
    assert sorted(members) in ([0, 1, 2], [0, 1, 2, 3]), members
    if 3 in members:  # carried on: made a learner again by the new leader, in its epoch
        assert (leader, "p", epoch, 3) in learns, learns
    else:  # given up: the learner dropped its copy
        assert not (c.brokers[3].data_dir / "streams" / "p").exists()


async def test_no_majority_of_the_new_set_commits_nothing_until_healed(
        cluster4: ProxiedCluster) -> None:
    """Member 3 is added; the moment the driver assigns the new epoch with {0, 1, 2, 3} (the
    set recorded first), member 3 and follower 1 are cut off: the leader and member 2 are two
    of four, no majority, so nothing is confirmed while they are cut, whatever the producer
    sends. Healed, they are assigned and everything commits, once."""
    c = cluster4
    c.create("q")
    watch = Watch(c, "q")
    cut = _hook(c, "assign", lambda member, name, epoch, role, leader, members:
                len(members) == 4, partial(_cut_now, c, 1, 3))
    c.drive()
    await eventually(lambda: c.record("q") == (1, 0), timeout=30, what="epoch 1 recorded")
    producer = Producer(c, "q")
    task = asyncio.create_task(producer.run())
    await producer.at_least(2000)
    _add(c, "q", 3)
    await eventually(lambda: cut, timeout=30, what="the new set recorded, 1 and 3 cut off")
    record = _record(c, "q")
    assert sorted(record["members"]) == [0, 1, 2, 3] and record["leader"] == 0
    epoch = record["epoch"]
    await eventually(lambda: c.member_state(0, "q")["epoch"] == epoch, timeout=10,
                     what="the leader in the new epoch")
    await eventually(lambda: c.member_state(2, "q")["epoch"] == epoch, timeout=10,
                     what="member 2 in the new epoch")
    for m in (1, 3):
        assert c.member_state(m, "q")["epoch"] < epoch, f"member {m} never heard"
    # stuck: the producer connects again and resends (the old epoch's last confirms, on their
    # way when the leader took the new epoch, are read meanwhile); then once more, and nothing
    # is confirmed without a majority
    await _round(producer)
    before = len(producer.confirmed)
    await _round(producer)
    assert len(producer.confirmed) == before, "nothing committed by two of four"
    assert c.record("q") == (epoch, 0), "no election: the leader answers the driver"
    c.heal(1)
    c.heal(3)
    members = await _finish(c, "q", producer, watch, task)
    assert sorted(members) == [0, 1, 2, 3], members


async def _served(c: ProxiedCluster, node: int, name: str) -> tuple[int, list[int], int]:
    """What Metadata at ``node`` answers for ``name`` (its code, the ports it names: leader,
    then replicas) and what a Subscribe there answers (OK, or its refusal's code)."""
    async with await connect(HOST, c.brokers[node].port, timeout=10) as client:
        answer = await client.metadata([name])
        ports = {b.reference: b.port for b in answer.brokers}
        (entry,) = answer.streams
        named = [ports[r] for r in [entry.leader, *entry.replicas] if r in ports]
        try:
            await client.consumer(name, "first")
        except StreamletError as e:
            return entry.code, named, int(e.code)
        return entry.code, named, Code.OK


async def test_a_member_removed_while_cut_off_drops_its_copy_once_healed(
        cluster4: ProxiedCluster) -> None:
    """Four members; member 3 cut off, then removed: the new set {0, 1, 2} is recorded and
    assigned without it (three of three: commits go on), and it stays to be told to leave
    while it cannot be reached, its copy and old epoch kept. Healed, it drops its copy
    (ReplicaLeave) and no longer serves the stream: Metadata and Subscribe there answer that
    it does not exist (these brokers read no stream directory), the leader's Metadata names
    three members, not member 3."""
    c = cluster4
    c.create("r", members=(0, 1, 2, 3))
    watch = Watch(c, "r")
    c.drive()
    await eventually(lambda: c.record("r") == (1, 0), timeout=30, what="epoch 1 recorded")
    producer = Producer(c, "r")
    task = asyncio.create_task(producer.run())
    await producer.at_least(1000)
    c.cut(3)
    asked = requests.write(c.root, Request(requests.MEMBERS, "r", to=3, change="remove"))
    await eventually(lambda: not asked.exists(), timeout=30, what="the removal done")
    assert requests.outcome(c.root, Request(requests.MEMBERS, "r", to=3,
                                            change="remove")) is None
    record = _record(c, "r")
    assert (record["members"], record["leaving"], record["leader"]) == ([0, 1, 2], [3], 0)
    await producer.at_least(1000)  # three of three commit
    assert _record(c, "r")["leaving"] == [3], "still to leave while cut off"
    state = c.member_state(3, "r")
    assert (state["epoch"], state["members"]) == (1, [0, 1, 2, 3]), "it never heard"
    c.heal(3)
    copy = c.brokers[3].data_dir / "streams" / "r"
    await eventually(lambda: not copy.exists() and not _record(c, "r")["leaving"],
                     timeout=30, what="member 3's copy dropped once healed")
    assert await _served(c, 3, "r") == (Code.STREAM_DOES_NOT_EXIST, [],
                                        Code.STREAM_DOES_NOT_EXIST), "member 3 holds no copy"
    code, named, subscribed = await _served(c, 0, "r")  # the leader names the new set
    assert (code, len(named), subscribed) == (Code.OK, 3, Code.OK), named
    assert not {c.brokers[3].port, c.proxies[3].port} & set(named), named
    members = await _finish(c, "r", producer, watch, task)
    assert members == [0, 1, 2]


async def test_the_leader_cut_off_as_the_new_set_is_recorded(
        cluster4: ProxiedCluster, caplog: pytest.LogCaptureFixture) -> None:
    """Member 3 is added and catches up; the moment the driver has recorded the new epoch with
    {0, 1, 2, 3} and is about to assign it, the leader (member 0) is cut off: it never hears of
    the new epoch, so the driver elects in the recorded set of four (members 1, 2 and 3 are a
    majority of it; the learner may lead, its log a prefix of the old leader's). Nothing the
    old leader took after the cut is confirmed; healed, it follows and the final set is the
    four."""
    caplog.set_level(logging.INFO, "streamlet.cluster")
    c = cluster4
    c.create("s")
    watch = Watch(c, "s")
    cut = _hook(c, "assign", lambda member, name, epoch, role, leader, members:
                len(members) == 4 and member == leader, partial(_cut_now, c, 0))
    c.drive()
    await eventually(lambda: c.record("s") == (1, 0), timeout=30, what="epoch 1 recorded")
    producer = Producer(c, "s")
    task = asyncio.create_task(producer.run())
    await producer.at_least(2000)
    _add(c, "s", 3)
    await eventually(lambda: cut, timeout=30, what="the new set recorded, the leader cut off")
    joined = _record(c, "s")
    assert sorted(joined["members"]) == [0, 1, 2, 3]
    epoch, leader = await eventually(
        lambda: (r := c.record("s")) is not None and r[0] > joined["epoch"]
        and r[1] in (1, 2, 3) and r, timeout=60, what="a leader elected in the new set")
    assert sorted(_record(c, "s")["members"]) == [0, 1, 2, 3], "elected in the recorded set"
    assert "but leader 0 did not take the epoch" in caplog.text, "not logged as done"
    assert c.member_state(0, "s")["epoch"] == 1, "the old leader never heard"
    await producer.at_least(1000)  # three of four commit
    c.heal(0)
    members = await _finish(c, "s", producer, watch, task)
    assert sorted(members) == [0, 1, 2, 3], members


async def test_a_member_removed_and_added_back_while_cut_off(cluster4: ProxiedCluster) -> None:
    """Four members; member 3 cut off and removed (it stays to be told to leave), then added
    back while still cut off: it is no longer to leave, and the add waits (the leader cannot
    make it a learner) without blocking the stream. Healed, it learns, keeping or replacing
    its old copy as the leader's log says, joins, and holds every confirmed message once."""
    c = cluster4
    c.create("b", members=(0, 1, 2, 3))
    watch = Watch(c, "b")
    c.drive()
    await eventually(lambda: c.record("b") == (1, 0), timeout=30, what="epoch 1 recorded")
    producer = Producer(c, "b")
    task = asyncio.create_task(producer.run())
    await producer.at_least(1000)
    c.cut(3)
    removal = requests.write(c.root, Request(requests.MEMBERS, "b", to=3, change="remove"))
    await eventually(lambda: not removal.exists(), timeout=30, what="the removal done")
    assert (_record(c, "b")["members"], _record(c, "b")["leaving"]) == ([0, 1, 2], [3])
    await producer.at_least(1000)
    _add(c, "b", 3)
    await eventually(lambda: (r := _record(c, "b"))["change"] is not None and not r["leaving"],
                     timeout=30, what="the add begun, member 3 no longer to leave")
    await producer.at_least(1000)  # the stream goes on meanwhile
    record = _record(c, "b")
    assert record["members"] == [0, 1, 2] and record["change"]["member"] == 3, record
    c.heal(3)
    await eventually(lambda: _record(c, "b")["members"] == [0, 1, 2, 3], timeout=60,
                     what="member 3 back in the set")
    members = await _finish(c, "b", producer, watch, task)
    assert members == [0, 1, 2, 3]


async def test_an_add_given_up_while_leader_and_learner_are_cut_off(
        cluster4: ProxiedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Member 3 is added; the moment the leader has made it a learner, both the leader and the
    learner are cut off. A new leader is elected among {0, 1, 2}, which cannot make member 3
    a learner, so the add is given up (its time limit shortened here): member 3 is to leave.
    Healed, it drops its copy, the old leader follows, and the set is {0, 1, 2} again."""
    monkeypatch.setattr(driver_module, "CHANGE_TIMEOUT_S", 6.0)
    c = cluster4
    c.create("g")
    watch = Watch(c, "g")
    cut = _hook(c, "learn", lambda leader, name, epoch, member: member == 3,
                partial(_cut_now, c, 0, 3))
    c.drive()
    await eventually(lambda: c.record("g") == (1, 0), timeout=30, what="epoch 1 recorded")
    producer = Producer(c, "g")
    task = asyncio.create_task(producer.run())
    await producer.at_least(1000)
    asked = _add(c, "g", 3)
    await eventually(lambda: cut, timeout=30, what="the learner made, leader and learner cut")
    await eventually(lambda: not asked.exists(), timeout=30, what="the add answered")
    why = requests.outcome(c.root, Request(requests.MEMBERS, "g", to=3, change="add"))
    assert why is not None and "given up" in why, why
    record = _record(c, "g")
    assert (record["members"], record["change"], record["leaving"]) == ([0, 1, 2], None, [3])
    assert record["replicas"] == 3, "the count asked for is given up too"
    await eventually(lambda: c.record("g")[1] in (1, 2), timeout=60,  # type: ignore[index]
                     what="a new leader among {0, 1, 2}")
    await producer.at_least(1000)
    c.heal(0)
    c.heal(3)
    await eventually(lambda: not (c.brokers[3].data_dir / "streams" / "g").exists(),
                     timeout=30, what="the learner's copy dropped once healed")
    members = await _finish(c, "g", producer, watch, task)
    assert members == [0, 1, 2]
