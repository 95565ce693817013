"""Member set changes in a local cluster (`streamlet cluster up`, real brokers on loopback):
a member whose node is stopped for good with its data wiped is replaced (`--replace-after`),
a stream grows from one copy to five members and shrinks back to one online (`cluster
members`), and a leader killed in the middle of a change loses nothing confirmed. A named
producer publishes throughout, resending what is not confirmed with its ids after a switch."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import connect
from streamlet.client.errors import StreamletError
from streamlet.cluster.probe import port_accepts
from tests.cluster.test_failover import _files, _led, _led_after, _record_confirms
from tests.cluster.test_local_cluster import HOST, Cluster, cli
from tests.support.waiting import eventually

pytestmark = pytest.mark.process


def _record(cluster: Cluster, name: str) -> dict[str, Any] | None:
    try:
        entry = json.loads((cluster.data_dir / "driver.json").read_text()).get(name)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def _members(cluster: Cluster, name: str) -> list[int] | None:
    record = _record(cluster, name)
    return None if record is None else record["members"]


def _shown(cluster: Cluster, name: str) -> dict[str, Any]:
    try:
        entry = json.loads((cluster.data_dir / "driver-status.json").read_text()).get(name)
    except (OSError, ValueError):
        return {}
    return entry if isinstance(entry, dict) else {}


class Publisher:
    """A named producer ("app") publishing ids 1.. to the stream's leader (``fallback`` while
    the directory names none), resending what is not confirmed with the same ids after each
    switch, until :meth:`finish`; then until everything sent is confirmed."""

    def __init__(self, cluster: Cluster, name: str, fallback: int | None = None) -> None:
        self.cluster, self.name, self.fallback = cluster, name, fallback
        self.confirmed: set[int] = set()
        self.sent = 0
        self.done = asyncio.Event()

    def finish(self) -> None:
        self.done.set()

    async def run(self) -> None:
        while True:
            led = _led(self.cluster, self.name)
            leader = led[1] if led is not None else self.fallback
            if leader is None:
                await asyncio.sleep(0.1)
                continue
            try:
                async with await connect(HOST, self.cluster.ports()[leader], timeout=5) as client:
                    producer = await client.producer(self.name, reference="app",
                                                     max_unconfirmed=100)
                    _record_confirms(producer, self.confirmed)
                    for i in range(1, self.sent + 1):  # the unconfirmed, again, with their ids
                        if i not in self.confirmed:
                            await producer.send(b"%d" % i, publishing_id=i)
                    while not self.done.is_set():  # new messages, paced
                        self.sent += 1
                        await producer.send(b"%d" % self.sent, publishing_id=self.sent)
                        if self.sent % 20 == 0:
                            await asyncio.sleep(0.01)
                    await asyncio.wait_for(producer.flush(), 10)
                    if len(self.confirmed) >= self.sent:
                        return
            except (StreamletError, OSError, TimeoutError):
                await asyncio.sleep(0.1)  # fenced, sealed or gone: ask the directory again

    async def at_least(self, more: int, timeout: float = 60) -> None:
        """Wait for ``more`` confirms beyond those there now."""
        enough = len(self.confirmed) + more
        await eventually(lambda: len(self.confirmed) >= enough, timeout=timeout,
                         what=f"{enough} confirmed")


async def _read_bodies(cluster: Cluster, node: int, name: str, n: int) -> list[bytes]:
    """The first ``n`` message bodies of ``name`` as member ``node`` serves them (once its
    broker runs: it may be restarting)."""
    await eventually(partial(port_accepts, HOST, cluster.ports()[node]), timeout=60,
                     what=f"node {node} listening")
    async with await connect(HOST, cluster.ports()[node], timeout=10) as client:
        consumer = await client.consumer(name, "first", credit=200)
        return [bytes((await asyncio.wait_for(consumer.__anext__(), 30)).body)
                for _ in range(n)]


async def _read_all(cluster: Cluster, node: int, name: str, n: int) -> list[int]:
    """The first ``n`` message bodies of ``name`` at member ``node``, as numbers."""
    return [int(b) for b in await _read_bodies(cluster, node, name, n)]


def _identical(cluster: Cluster, members: list[int], name: str) -> bool:
    files = [_files(cluster, m, name, (".segment",)) for m in members]
    return bool(files[0]) and all(f == files[0] for f in files)


async def _replicas(cluster: Cluster, name: str, count: int) -> bool:
    """Whether Metadata (node 0's answer) lists ``count`` replicas beside the leader."""
    async with await connect(HOST, cluster.ports()[0], timeout=10) as client:
        (entry,) = (await client.metadata([name])).streams
        return len(entry.replicas) == count


def _members_cli(cluster: Cluster, name: str, how: str, node: int) -> str:
    out = cli("cluster", "members", name, how, str(node), "--data-dir", str(cluster.data_dir),
              timeout=180)
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


@pytest.fixture
def cluster5(tmp_path: Path) -> Any:
    c = Cluster(tmp_path / "c", 5).start()
    yield c
    c.stop()


async def test_one_copy_grows_to_five_members_and_back_online(cluster5: Cluster) -> None:
    """RF 1 -> 3 -> 5 -> 3 -> 1 with `cluster members` while a named producer publishes to
    the leader and a consumer reads from it: every confirmed message read once, in order, and
    each removed member's copy gone."""
    cluster = cluster5
    async with await connect(HOST, cluster.ports()[0]) as client:
        await client.create_stream("g")  # one copy, on node 0: no member state
    publisher = Publisher(cluster, "g", fallback=0)
    bodies: list[int] = []
    sizes: list[list[int]] = []

    async def consume() -> None:
        async with await connect(HOST, cluster.ports()[0], timeout=10) as client:
            consumer = await client.consumer("g", "first", credit=200)
            async for message in consumer:
                bodies.append(int(message.body))

    async def change() -> None:
        try:
            await publisher.at_least(300)
            steps = [("--add", 1), ("--add", 2), ("--add", 3), ("--add", 4),
                     ("--remove", 4), ("--remove", 3), ("--remove", 2), ("--remove", 1)]
            for how, node in steps:
                out = await asyncio.to_thread(_members_cli, cluster, "g", how, node)
                members = _members(cluster, "g")
                assert members is not None and (node in members) == (how == "--add"), out
                assert f"members {members}" in out, out
                sizes.append(members)
                await eventually(partial(_replicas, cluster, "g", len(members) - 1), timeout=10,
                                 what=f"Metadata listing {len(members) - 1} replicas")
                await publisher.at_least(200)  # publishing goes on between the changes
        finally:
            publisher.finish()

    reader = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(asyncio.gather(change(), publisher.run()), 300)
        n = publisher.sent
        assert publisher.confirmed == set(range(1, n + 1))
        await eventually(lambda: len(bodies) >= n, timeout=60, what=f"{n} messages consumed")
    finally:
        reader.cancel()
    assert bodies[:n] == list(range(1, n + 1)), "every confirmed message once, in order"
    assert [len(m) for m in sizes] == [2, 3, 4, 5, 4, 3, 2, 1], sizes
    record = _record(cluster, "g")
    assert record is not None and record["leader"] == 0 and record["members"] == [0]
    assert record["change"] is None and record["replicas"] == 1

    def dropped() -> bool:  # each former member told to drop its copy
        return all(not (cluster.data_dir / f"node-{i}" / "streams" / "g").exists()
                   for i in range(1, 5))

    await eventually(dropped, timeout=30, what="the removed members' copies deleted")
    assert await _read_all(cluster, 0, "g", n) == list(range(1, n + 1))


@pytest.fixture
def cluster4(tmp_path: Path) -> Any:
    c = Cluster(tmp_path / "c", 4, ["--replace-after", "2"]).start()
    yield c
    c.stop()


async def _kill_leader(cluster: Cluster, name: str) -> None:
    epoch, leader = await eventually(lambda: _led(cluster, name), timeout=30, what="a leader")
    os.kill(cluster.state()["nodes"][leader]["pid"], signal.SIGKILL)
    await eventually(partial(_led_after, cluster, name, epoch), timeout=60,
                     what="a leader elected in a later epoch")


async def test_a_lost_member_is_replaced_and_the_stream_survives_leader_kills(
        cluster4: Cluster) -> None:
    """A follower's node stopped for good with its data wiped (`stop-node --wipe`) while a
    named producer publishes: with `--replace-after 2`, the node that held no member of the
    stream becomes one, catches up, and the lost member is removed. The stream then survives
    three leader kills; every confirmed message (the raw producer's, and those of an rstream
    producer beside it) is read once, in order, from every member (the new one included),
    and the members' segment files end byte-identical."""
    cluster = cluster4
    async with await connect(HOST, cluster.ports()[0]) as client:
        await client.create_stream("r", arguments={"initial-cluster-size": "3"})
    await eventually(lambda: _led(cluster, "r"), timeout=30, what="the driver's record")
    before = _members(cluster, "r")
    assert before is not None and len(before) == 3
    (spare,) = set(range(4)) - set(before)
    _, leader = _led(cluster, "r") or (0, 0)
    lost = max(m for m in before if m != leader)
    publisher = Publisher(cluster, "r")
    sent_rs: list[int] = []  # rstream's ids, each confirmed before the next is sent

    async def rstream_publisher() -> None:
        """rstream unchanged, named ("rs"): it finds the new leader by itself; what it reports
        unconfirmed is sent again with the same id (deduplicated)."""
        from rstream import Producer, RawMessage

        async with Producer(HOST, cluster.ports()[leader], username="guest",
                            password="guest") as producer:
            while not publisher.done.is_set():
                i = len(sent_rs) + 1
                while True:
                    try:
                        await asyncio.wait_for(producer.send_wait(
                            "r", RawMessage(b"s%d" % i, publishing_id=i), publisher_name="rs"),
                            10)
                        break
                    except Exception:  # recovering: rstream reconnects to the new leader itself
                        await asyncio.sleep(0.2)
                sent_rs.append(i)
                await asyncio.sleep(0.005)

    async def scenario() -> None:
        try:
            await publisher.at_least(300)
            out = await asyncio.to_thread(cli, "cluster", "stop-node", str(lost), "--wipe",
                                          "--data-dir", str(cluster.data_dir))
            assert out.returncode == 0 and "stopped" in out.stdout, out.stderr + out.stdout
            assert not (cluster.data_dir / f"node-{lost}" / "streams").exists()
            await publisher.at_least(200)

            def replaced() -> bool:
                record = _record(cluster, "r")
                return (record is not None and record["change"] is None
                        and sorted(record["members"]) == sorted({*before, spare} - {lost}))

            await eventually(replaced, timeout=45, what=f"member {lost} replaced by {spare}")
            for _ in range(3):
                await publisher.at_least(500)
                await _kill_leader(cluster, "r")
            await publisher.at_least(200)
        finally:
            publisher.finish()

    await asyncio.wait_for(asyncio.gather(scenario(), publisher.run(), rstream_publisher()),
                           240)
    n, k = publisher.sent, len(sent_rs)
    assert publisher.confirmed == set(range(1, n + 1)) and k > 0
    members = _members(cluster, "r")
    assert members is not None and spare in members and lost not in members
    for m in members:
        bodies = await _read_bodies(cluster, m, "r", n + k)
        assert [int(b) for b in bodies if not b.startswith(b"s")] == list(range(1, n + 1)), m
        assert [int(b[1:]) for b in bodies if b.startswith(b"s")] == list(range(1, k + 1)), m
    await eventually(lambda: _identical(cluster, members, "r"), timeout=60,
                     what="the members' segment files byte-identical")
    assert _shown(cluster, "r").get("changing") is None
    out = cli("cluster", "start-node", str(lost), "--data-dir", str(cluster.data_dir))
    assert out.returncode == 0 and f"node {lost} started" in out.stdout, out.stderr + out.stdout
    assert cluster.state()["nodes"][lost]["alive"]


async def _kill_when(cluster: Cluster, name: str, moment: Any, what: str) -> int:
    """Kill -9 the leader as soon as ``moment(record)`` holds; the member killed."""
    async def seen() -> dict[str, Any] | None:
        for _ in range(10):  # a tight poll: the moment is short
            record = _record(cluster, name)
            if record is not None and record["leader"] >= 0 and moment(record):
                return record
            await asyncio.sleep(0.005)
        return None

    record = await eventually(seen, timeout=60, what=what)
    leader = record["leader"]
    os.kill(cluster.state()["nodes"][leader]["pid"], signal.SIGKILL)
    return int(leader)


async def test_a_leader_killed_during_a_change_loses_nothing(tmp_path: Path) -> None:
    """The leader killed (kill -9) while a learner is being added, then right after the next
    change's new member set is recorded: each change completes or is undone (the learner
    drops its copy), a leader is elected among the recorded members, and every confirmed
    message is read once, in order, from every member."""
    cluster = Cluster(tmp_path / "c", 4).start()
    try:
        async with await connect(HOST, cluster.ports()[0]) as client:
            await client.create_stream("k", arguments={"initial-cluster-size": "3"})
        await eventually(lambda: _led(cluster, "k"), timeout=30, what="the driver's record")
        before = _members(cluster, "k")
        assert before is not None
        (spare,) = set(range(4)) - set(before)
        publisher = Publisher(cluster, "k")
        outcomes: list[tuple[str, int, str]] = []

        async def change(how: str, moment: Any, what: str) -> None:
            asked = asyncio.create_task(asyncio.to_thread(
                cli, "cluster", "members", "k", how, str(spare), "--data-dir",
                str(cluster.data_dir), timeout=180))
            killed = await _kill_when(cluster, "k", moment, what)
            out = await asked
            assert out.returncode in (0, 1), out
            outcomes.append((how, out.returncode, out.stderr))
            assert killed in before or killed == spare
            await eventually(lambda: _led(cluster, "k"), timeout=60, what="a leader again")
            await eventually(lambda: (_record(cluster, "k") or {}).get("change") is None,
                             timeout=150, what="no change under way")
            await publisher.at_least(300)

        def grown(record: dict[str, Any]) -> bool:
            return record["change"] is not None

        async def scenario() -> None:
            try:
                await publisher.at_least(500)
                # killed while the learner catches up (the change begun, not joined)
                await change("--add", grown, "the add under way")
                members = _members(cluster, "k") or []
                # killed right after the next change's member set is recorded
                how = "--remove" if spare in members else "--add"
                await change(how, lambda r: sorted(r["members"]) != sorted(members),
                             "the new member set recorded")
            finally:
                publisher.finish()

        await asyncio.wait_for(asyncio.gather(scenario(), publisher.run()), 300)
        n = publisher.sent
        assert publisher.confirmed == set(range(1, n + 1)), "every message confirmed"
        members = _members(cluster, "k")
        assert members is not None and len(members) in (3, 4), (members, outcomes)
        for m in members:
            assert await _read_all(cluster, m, "k", n) == list(range(1, n + 1)), (m, outcomes)
        await eventually(lambda: _identical(cluster, members, "k"), timeout=60,
                         what="the members' segment files byte-identical")
        if spare not in members:  # undone, or removed: the spare drops its copy
            await eventually(lambda: not (cluster.data_dir / f"node-{spare}" / "streams" /
                                          "k").exists(), timeout=60,
                             what=f"node {spare}'s copy dropped")
    finally:
        cluster.stop()


def test_refused_changes_status_and_a_rebalance(tmp_path: Path) -> None:
    """`cluster members` refuses with membership's reason (exit 1, stderr); `cluster status
    --json` shows the members in sync and no change; `cluster rebalance` spreads three
    streams led by one node over the three."""
    from tests.cluster.test_failover import _create_replicated
    from tests.cluster.test_local_cluster import status_json, wait_until

    cluster = Cluster(tmp_path / "c", 3).start()
    try:
        for name in ("a", "b", "c"):
            _create_replicated(cluster, name)
        wait_until(lambda: all(_led(cluster, n) == (1, 0) for n in "abc"), 30,
                   "the driver's records")
        d = str(cluster.data_dir)
        out = cli("cluster", "members", "a", "--remove", "0", "--data-dir", d)
        assert (out.returncode, out.stderr) == (1, "streamlet: a: remove member 0 not done: "
                                                   "member 0 leads: transfer its leadership "
                                                   "first\n"), out
        out = cli("cluster", "members", "a", "--add", "1", "--data-dir", d)
        assert out.returncode == 1 and "member 1 is already a member" in out.stderr, out
        out = cli("cluster", "members", "nope", "--add", "1", "--data-dir", d)
        assert out.returncode == 1 and "no stream nope on any node" in out.stderr, out

        def synced() -> Any:
            streams = status_json(cluster.data_dir)["streams"]
            return streams if all(s["in_sync"] == [0, 1, 2] for s in streams) else None

        for entry in wait_until(synced, 30, "every member in sync"):
            assert entry["changing"] is None
        out = cli("cluster", "rebalance", "--data-dir", d, timeout=120)
        assert out.returncode == 0, out
        leaders = sorted((_led(cluster, n) or (0, -1))[1] for n in "abc")
        assert leaders == [0, 1, 2], out.stdout
        out = cli("cluster", "rebalance", "--data-dir", d)
        assert (out.returncode, out.stdout) == (0, "leaders already spread evenly: nothing "
                                                   "moved\n"), out
    finally:
        cluster.stop()


async def test_a_wiped_member_that_comes_back_is_given_a_new_copy(tmp_path: Path) -> None:
    """Three nodes, `--replace-after 2`: a follower's node stopped with its data wiped cannot
    be replaced (no other node), so the stream runs on two; started again without a copy, the
    member is removed, then added again (a learner that catches up from nothing), and serves
    every confirmed message once, its segment files identical to the others'."""
    cluster = Cluster(tmp_path / "c", 3, ["--replace-after", "2"]).start()
    try:
        async with await connect(HOST, cluster.ports()[0]) as client:
            await client.create_stream("w", arguments={"initial-cluster-size": "3"})
        await eventually(lambda: _led(cluster, "w"), timeout=30, what="the driver's record")
        _, leader = _led(cluster, "w") or (0, 0)
        wiped = max(m for m in range(3) if m != leader)
        publisher = Publisher(cluster, "w")
        d = str(cluster.data_dir)

        async def scenario() -> None:
            try:
                await publisher.at_least(300)
                out = await asyncio.to_thread(cli, "cluster", "stop-node", str(wiped), "--wipe",
                                              "--data-dir", d)
                assert out.returncode == 0, out
                await eventually(lambda: f"stream w: member {wiped} lost" in cluster.log_text(),
                                 timeout=30, what="the driver saying no node can replace it")
                assert _members(cluster, "w") == [0, 1, 2]
                await publisher.at_least(300)
                out = await asyncio.to_thread(cli, "cluster", "start-node", str(wiped),
                                              "--data-dir", d)
                assert out.returncode == 0, out
                await eventually(lambda: _members(cluster, "w") != [0, 1, 2], timeout=30,
                                 what="the empty member removed")

                def back() -> bool:
                    record = _record(cluster, "w")
                    return (record is not None and record["members"] == [0, 1, 2]
                            and record["change"] is None)

                await eventually(back, timeout=60, what="the member added again")
                await publisher.at_least(300)
            finally:
                publisher.finish()

        await asyncio.wait_for(asyncio.gather(scenario(), publisher.run()), 240)
        n = publisher.sent
        assert publisher.confirmed == set(range(1, n + 1))
        assert await _read_all(cluster, wiped, "w", n) == list(range(1, n + 1))
        await eventually(lambda: _identical(cluster, [0, 1, 2], "w"), timeout=60,
                         what="the members' segment files byte-identical")
    finally:
        cluster.stop()
