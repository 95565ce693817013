"""Fuzzing the SBP listener in process: 100,000 random frames of every opcode, mostly
well-formed, some mutated, fed into the broker's real SbpConnection (the LISTENERS factory, a
broker that never listens, a fake transport). Every APPEND answered with an offset must find
its batch at that offset at the end; the broker logs no error and still serves a clean
connection, and so does a broker restarted on the same data (an APPEND, then a FETCH of it;
every batch still at its offset)."""

from __future__ import annotations

import random
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from streamlet.broker.protocols import LISTENERS, load
from streamlet.broker.sbp.connection import SbpConnection
from streamlet.broker.server import Broker
from streamlet.sbp import Opcode, SbpSplitter, decode, encode, read, stream_id, write
from streamlet.sbp.fbs.AppendInfo import AppendInfoT
from streamlet.sbp.fbs.AppendRequest import AppendRequestT
from streamlet.sbp.fbs.AppendResponse import AppendResponseT
from streamlet.sbp.fbs.AppendRun import AppendRunT
from streamlet.sbp.fbs.CreateStreamsRequest import CreateStreamsRequestT
from streamlet.sbp.fbs.DescribeStreamsRequest import DescribeStreamsRequestT
from streamlet.sbp.fbs.FetchInfo import FetchInfoT
from streamlet.sbp.fbs.FetchRequest import FetchRequestT
from streamlet.sbp.fbs.ListRangesRequest import ListRangesRequestT
from streamlet.sbp.fbs.RangeOwner import RangeOwnerT
from streamlet.sbp.fbs.Stream import StreamT
from tests.mega.test_mega_fuzz import read_at
from tests.rsio.test_rsio_fuzz import flush
from tests.support.fakes import FakeTransport
from tests.support.reopen import close, reopen

FUZZ_FRAMES = 100_000
NAMES = ["sf-0", "sf-0", "sf-0", "sf-1", "sf-none"]


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(load(data_dir=tmp_path / "data"), LISTENERS)  # never started: no socket
    yield b
    for vhost in b.vhosts.values():
        vhost.close()


class Wire:
    def __init__(self, broker: Broker) -> None:
        self.conn = cast(SbpConnection, LISTENERS["sbp"](broker, False))
        self.transport = FakeTransport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]

    def frames(self) -> list[Any]:
        out = []
        for raw in SbpSplitter(0).feed(self.transport.take()):
            out.append(decode(bytes(raw)))
        return out


def random_frame(rng: random.Random, sid: int, asked: dict[int, list[tuple[str, bytes]]]) -> bytes:
    op = rng.choice([Opcode.APPEND] * 8 + [Opcode.FETCH] * 2 + list(Opcode))
    header: Any = None
    payload = b""
    if op is Opcode.APPEND:
        batches = [(rng.choice(NAMES), rng.randbytes(rng.randrange(0, 30)))
                   for _ in range(rng.randrange(0, 6))]
        asked[sid] = batches
        header = AppendRequestT()
        form = rng.random()
        if form < 0.4:  # the document's form: a table per batch
            infos = []
            for i, (name, data) in enumerate(batches):
                info = AppendInfoT()
                info.streamId, info.requestIndex, info.batchLength = stream_id(name), i, len(data)
                infos.append(info)
            header.appendRequests = infos
        else:  # streamlet's AppendRuns: consecutive batches to one stream
            prefixed = form >= 0.7  # each batch behind its length in the payload
            header.appendRuns, header.lengthPrefixed = [], prefixed
            for i, (name, data) in enumerate(batches):
                if not (i and batches[i - 1][0] == name):
                    run = AppendRunT()
                    run.streamId, run.requestIndex = stream_id(name), i
                    run.batchLengths = None if prefixed else []
                    header.appendRuns.append(run)
                if prefixed:
                    header.appendRuns[-1].batchCount += 1
                else:
                    header.appendRuns[-1].batchLengths.append(len(data))
        payload = b"".join(struct.pack(">I", len(d)) * bool(header.lengthPrefixed) + d
                           for _, d in batches)
    elif op is Opcode.FETCH:
        header = FetchRequestT()
        f = FetchInfoT()
        f.streamId, f.fetchOffset = stream_id(rng.choice(NAMES)), rng.randrange(-2, 3000)
        f.batchMaxBytes = rng.randrange(-1, 500)
        header.fetchRequests, header.minBytes = [f], rng.randrange(-1, 100)
        header.maxWaitMs = 0  # no timers left behind: answered at once
        header.runResults = rng.random() < 0.5  # streamlet's: a result per run
        header.lengthPrefixed = rng.random() < 0.3  # and its batches as stored
    elif op is Opcode.CREATE_STREAMS:
        header = CreateStreamsRequestT()
        s = StreamT()
        s.name, s.replicaNums = rng.choice(NAMES + ["amq.x", ""]), rng.randrange(-1, 3)
        header.streams = [s]
    elif op is Opcode.DESCRIBE_STREAMS:
        header = DescribeStreamsRequestT()
        header.streamIds = [stream_id(rng.choice(NAMES)), rng.randrange(1 << 63)]
    elif op is Opcode.LIST_RANGES:
        header = ListRangesRequestT()
        o = RangeOwnerT()
        o.streamId = stream_id(rng.choice(NAMES))
        header.rangeOwners = [o]
    elif op in (Opcode.GOAWAY, Opcode.DELETE_STREAMS):
        op = Opcode.PING  # they end the run's state early; tested in test_sbp.py
    raw = b"" if header is None else write(header)
    if header is None and rng.random() < 0.3:
        raw = rng.randbytes(rng.randrange(1, 30))  # a header the opcode's table cannot be
    return encode(op, rng.choice([0, 0, 0, 1, 2, 4]), sid, raw, payload)


def mutate(rng: random.Random, raw: bytes) -> bytes:
    b = bytearray(raw)
    how = rng.randrange(3)
    if how == 0:
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif how == 1:
        at = rng.randrange(16, len(b) + 1)
        b[at:at] = rng.randbytes(rng.randrange(1, 12))
        b[0:4] = struct.pack(">I", len(b))  # framed: the damage is inside
    else:
        return rng.randbytes(rng.randrange(1, 40))
    return bytes(b)


@pytest.mark.slow  # a long fuzz loop: make test runs it, make test-fast does not
async def test_fuzz_in_process(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(20261123)
    streams = broker.vhosts["/"].streams
    from streamlet.broker.arguments import parse_create_arguments
    for name in ("sf-0", "sf-1"):
        streams.create(name, parse_create_arguments({}, broker.config.retention))
    appended: dict[tuple[str, int], bytes] = {}
    frames = connections = sid = 0
    while frames < FUZZ_FRAMES:
        wire = Wire(broker)
        connections += 1
        asked: dict[int, list[tuple[str, bytes]]] = {}
        for _ in range(rng.randrange(100, 3000)):
            sid += 1
            raw = random_frame(rng, sid, asked)
            bad = rng.random() < 0.01
            if bad:
                raw = mutate(rng, raw)
                asked.pop(sid, None)  # whatever it became, its answers are not counted
            wire.conn.data_received(raw)
            frames += 1
            if frames % 16 == 0:
                flush(broker)
            if wire.transport.closed:
                break
        flush(broker)
        for f in wire.frames():
            if f is None or f.opcode != Opcode.APPEND or f.is_system_error or f.stream_id not in asked:
                continue
            t = read(AppendResponseT, f.header)
            for r in t.appendResponses or []:
                if r.status.code == 0:
                    for k in range(r.batchCount):  # more than 1 answering an AppendRun
                        name, data = asked[f.stream_id][r.requestIndex + k]
                        key = (name, r.baseOffset + k)
                        assert key not in appended, "an offset given to two batches"
                        appended[key] = data
        wire.conn.connection_lost(None)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")], \
        "the broker logged an error (an exception in a handler)"
    assert connections > 20 and len(appended) > 30_000
    for (name, offset), data in appended.items():
        assert read_at(broker, name, offset) == data
    wire = Wire(broker)  # and a clean connection is served
    wire.conn.data_received(encode(Opcode.PING, 0, 1, b"", b"ok"))
    (pong,) = wire.frames()
    assert bytes(pong.payload) == b"ok"

    again = reopen(broker, caplog)  # stopped and started on the same data: it serves
    try:
        for (name, offset), data in appended.items():
            assert read_at(again, name, offset) == data
        wire = Wire(again)
        header = AppendRequestT()
        info = AppendInfoT()
        info.streamId, info.requestIndex, info.batchLength = stream_id("sf-0"), 0, 9
        header.appendRequests = [info]
        wire.conn.data_received(encode(Opcode.APPEND, 0, 1, write(header), b"restarted"))
        flush(again)
        (answer,) = wire.frames()
        (r,) = read(AppendResponseT, answer.header).appendResponses
        assert r.status.code == 0
        fetch = FetchRequestT()
        f = FetchInfoT()
        f.streamId, f.fetchOffset, f.batchMaxBytes = stream_id("sf-0"), r.baseOffset, 1000
        fetch.fetchRequests, fetch.maxWaitMs = [f], 0
        wire.conn.data_received(encode(Opcode.FETCH, 0, 2, write(fetch), b""))
        (fetched,) = wire.frames()
        assert fetched.opcode == Opcode.FETCH and b"restarted" in bytes(fetched.payload)
    finally:
        close(again)
