"""A stream whose directory entry switches to another broker is sealed on this one: publishers
are told (MetadataUpdate) and dropped, nothing more is confirmed, reads go on, and naming this
broker again undoes it. Real broker process, a raw peer publishing without pause."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from streamlet.client import connect
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.publish import publish_frame
from tests.support.brokers import BrokerProcess
from tests.support.raw import RawPeer
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]
BATCH = 10
AFTER_SEAL = 5  # batches sent once the MetadataUpdate came: they must all be refused


class Publishing:
    """A sender and a reader thread on one raw connection; the reader records, in order,
    every confirm, error and MetadataUpdate the broker sent."""

    def __init__(self, peer: RawPeer) -> None:
        self.peer = peer
        self.sent: list[int] = []
        self.events: list[f.Command] = []
        self.confirmed: set[int] = set()
        self.moved = threading.Event()
        self.done = threading.Event()

    def send(self) -> None:
        next_id, after = 1, 0
        while after < AFTER_SEAL:
            # Looked at before the send: a batch sent just before the MetadataUpdate arrived
            # may have been confirmed ahead of the seal, so it must not count as after it.
            moved = self.moved.is_set()
            ids = list(range(next_id, next_id + BATCH))
            self.peer.send_raw(publish_frame(1, enumerate([f"m{i}".encode() for i in ids], next_id)))
            self.sent += ids
            next_id += BATCH
            if moved:
                after += 1
            self.done.wait(0.002)
        self.done.set()

    def read(self) -> None:
        refused: set[int] = set()
        # until every publish sent is answered (the test's wait_for bounds it)
        while not (self.done.is_set() and len(self.confirmed) + len(refused) >= len(self.sent)):
            try:
                cmd = self.peer.recv()
            except TimeoutError:
                continue
            if cmd is None:
                return
            self.events.append(cmd)  # type: ignore[arg-type]
            if isinstance(cmd, f.PublishConfirm):
                self.confirmed.update(cmd.publishing_ids)
            elif isinstance(cmd, f.PublishError):
                refused.update(pid for pid, _ in cmd.errors)
            elif isinstance(cmd, f.MetadataUpdate):
                self.moved.set()


async def test_a_stream_moved_away_is_sealed_and_loses_no_confirmed_message(
        tmp_path: Path, broker_factory: Factory) -> None:
    directory = tmp_path / "streams.json"
    directory.write_text(json.dumps({"streams": {}}))
    config = tmp_path / "a.toml"
    config.write_text(f'[cluster]\ndirectory_file = "{directory}"\n')
    a = broker_factory(config=config)
    here = f"127.0.0.1:{a.port}"
    directory.write_text(json.dumps({"streams": {"s": here}}))

    with RawPeer(a.host, a.port) as peer:
        peer.handshake()
        created = peer.request(f.Create(peer.next_corr(), "s"), f.CreateResponse)
        assert isinstance(created, f.CreateResponse) and created.code == Code.OK
        declared = peer.request(f.DeclarePublisher(peer.next_corr(), 1, None, "s"),
                                f.DeclarePublisherResponse)
        assert isinstance(declared, f.DeclarePublisherResponse) and declared.code == Code.OK
        peer.sock.settimeout(1.0)  # the reader looks at its stop condition at least every second
        pub = Publishing(peer)
        sender = asyncio.create_task(asyncio.to_thread(pub.send))
        reader = asyncio.create_task(asyncio.to_thread(pub.read))
        while len(pub.confirmed) < 300:
            await asyncio.sleep(0.01)
        directory.write_text(json.dumps({"streams": {"s": "elsewhere:5552"}}))  # the switch
        await asyncio.wait_for(asyncio.gather(sender, reader), 120)

    updates = [i for i, e in enumerate(pub.events) if isinstance(e, f.MetadataUpdate)]
    assert len(updates) == 1, "one MetadataUpdate, sent by the directory timer"
    update = pub.events[updates[0]]
    assert isinstance(update, f.MetadataUpdate)
    assert (update.code, update.stream) == (Code.STREAM_NOT_AVAILABLE, "s")
    after = pub.events[updates[0] + 1:]
    assert not any(isinstance(e, f.PublishConfirm) for e in after), "a confirm after the seal"
    errors = [err for e in pub.events if isinstance(e, f.PublishError) for err in e.errors]
    assert len(errors) >= AFTER_SEAL * BATCH
    assert {code for _, code in errors} == {Code.STREAM_NOT_AVAILABLE}
    refused = {pid for pid, _ in errors}
    assert refused.isdisjoint(pub.confirmed)
    assert refused | pub.confirmed == set(pub.sent), "every publish answered"

    client = await connect(a.host, a.port)
    try:
        # Reads go on: the stream holds exactly what was confirmed, in order.
        stored: list[bytes] = []
        consumer = await client.consumer("s", offset="first")
        async for _header, records, _first in consumer.chunks():
            stored += [bytes(r) for r in records]
            if len(stored) >= len(pub.confirmed):
                break
        await consumer.close()
        assert stored == [f"m{i}".encode() for i in sorted(pub.confirmed)]
        assert (await client.stream_stats("s"))["sealed"] == 1
        meta = await client.metadata(["s"])
        brokers = {b.reference: (b.host, b.port) for b in meta.brokers}
        assert brokers[meta.streams[0].leader] == ("elsewhere", 5552)
        try:
            await client.producer("s")
        except Exception as e:
            assert getattr(e, "code", None) == Code.STREAM_NOT_AVAILABLE
        else:
            raise AssertionError("a publisher declared on a sealed stream")

        directory.write_text(json.dumps({"streams": {"s": here}}))  # the move undone

        async def unsealed() -> bool:
            return (await client.stream_stats("s"))["sealed"] == 0
        await eventually(unsealed, 60, "the stream unsealed")
        producer = await client.producer("s")
        await producer.send(b"again")
        await producer.flush()
        assert producer.confirmed_count == 1
        await producer.close()
    finally:
        await client.close()


async def test_a_stream_created_while_the_directory_names_another_broker_takes_publishes(
        tmp_path: Path, broker_factory: Factory) -> None:
    """A move's new stream: the directory still names the old broker while it is filled."""
    directory = tmp_path / "streams.json"
    directory.write_text(json.dumps({"streams": {"s": "old-pod:5552"}}))
    config = tmp_path / "b.toml"
    config.write_text(f'[cluster]\ndirectory_file = "{directory}"\n')
    b = broker_factory(config=config)
    client = await connect(b.host, b.port)
    try:
        await client.metadata(["s"])  # the directory is loaded before the stream exists
        await client.create_stream("s")
        await asyncio.sleep(1.5)  # the scenario: a directory timer tick passes (must not seal it)
        producer = await client.producer("s")
        await producer.send(b"copied")
        await producer.flush()
        assert producer.confirmed_count == 1
        assert (await client.stream_stats("s"))["sealed"] == 0
    finally:
        await client.close()
