"""Single-active-consumer groups of a replicated stream, decided at its leader (real brokers on
loopback, docs/replication.md): consumers of one group subscribed on different members, one
active at a time; a hand-over when the active one goes; a partitioned group; a leader change."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streamlet.client import Client, connect
from streamlet.client.consumer import Consumer
from tests.broker.test_replication import Factory, _stream_on_members
from tests.support.brokers import BrokerProcess
from tests.support.waiting import eventually

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


async def watch(who: str, broker: BrokerProcess, stream: str, timeline: Timeline,
                group: str = "grp", props: dict[str, str] | None = None) -> Watched:
    client = await connect(broker.host, broker.port)
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


async def publish(broker: BrokerProcess, stream: str, bodies: list[bytes]) -> None:
    async with await connect(broker.host, broker.port) as c:
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
