"""The SBP listener against a real broker process on loopback: every opcode sent and its answer
checked, APPEND to several streams in one frame answered per request index, FETCH's long poll
(min_bytes, max_wait_ms, per-stream answers, batch_max_bytes), GOAWAY both ways, bad input
answered or closed without harm to another connection, and offsets and bytes shared with the
RabbitMQ Stream protocol (rstream and the project's client) both ways."""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rstream import Consumer as RConsumer
from rstream import ConsumerOffsetSpecification, OffsetType, RawMessage
from rstream import Producer as RProducer

from streamlet.client import connect
from streamlet.client.sbp import SbpClient, SbpError
from streamlet.sbp import LAST, ErrorCode, Flags, Opcode, decode, encode, read, stream_id, write
from streamlet.sbp.fbs.AllocateIdRequest import AllocateIdRequestT
from streamlet.sbp.fbs.CreateRangeRequest import CreateRangeRequestT
from streamlet.sbp.fbs.DescribePlacementDriverClusterRequest import (
    DescribePlacementDriverClusterRequestT,
)
from streamlet.sbp.fbs.DescribeRangesRequest import DescribeRangesRequestT
from streamlet.sbp.fbs.GoAway import GoAwayT
from streamlet.sbp.fbs.HeartbeatRequest import HeartbeatRequestT
from streamlet.sbp.fbs.ListRangesRequest import ListRangesRequestT
from streamlet.sbp.fbs.RangeId import RangeIdT
from streamlet.sbp.fbs.RangeInfo import RangeInfoT
from streamlet.sbp.fbs.RangeOwner import RangeOwnerT
from streamlet.sbp.fbs.RangeServer import RangeServerT
from streamlet.sbp.fbs.ReportMetricsRequest import ReportMetricsRequestT
from streamlet.sbp.fbs.SealRangesRequest import SealRangesRequestT
from streamlet.sbp.fbs.Stream import StreamT
from streamlet.sbp.fbs.StreamRanges import StreamRangesT
from streamlet.sbp.fbs.SyncRangesRequest import SyncRangesRequestT
from streamlet.sbp.fbs.SystemErrorResponse import SystemErrorResponseT
from streamlet.sbp.fbs.TrimmedStream import TrimmedStreamT
from streamlet.sbp.fbs.TrimStreamsRequest import TrimStreamsRequestT
from streamlet.sbp.fbs.UpdateStreamsRequest import UpdateStreamsRequestT
from streamlet.sbp.headers import text
from tests.broker.test_rstream import consume as rstream_consume
from tests.support.brokers import BrokerProcess, free_port, wait_for_port


class SbpBroker(BrokerProcess):
    sbp_port: int

    def start(self) -> SbpBroker:
        super().start()
        wait_for_port(self.host, self.sbp_port, proc=self.proc)
        return self


def sbp_broker(root: Path, max_frame: int = 1 << 20) -> SbpBroker:
    port = free_port()
    cfg = root / "sbp.toml"
    cfg.write_text(f"[listeners.sbp]\nport = {port}\nmax_frame_bytes = {max_frame}\n")
    root.joinpath("data").mkdir(parents=True, exist_ok=True)
    b = SbpBroker(root / "data", config=cfg)
    b.sbp_port = port
    return b


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SbpBroker]:
    b = sbp_broker(tmp_path_factory.mktemp("sbp"))
    b.start()
    yield b
    b.stop()


async def client(b: SbpBroker) -> SbpClient:
    return await SbpClient.connect(b.host, b.sbp_port)


async def one(c: SbpClient, opcode: Opcode, header: Any) -> Any:
    (table, _), = await c.request(opcode, header)
    return table


class Raw:
    """A raw SBP connection: bytes out, frames in (bounded waits)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.buf = reader, writer, bytearray()

    @classmethod
    async def open(cls, b: SbpBroker) -> Raw:
        return cls(*await asyncio.open_connection(b.host, b.sbp_port))

    async def frame(self, timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while len(self.buf) < 4 or len(self.buf) < struct.unpack_from(">I", self.buf)[0]:
            data = await asyncio.wait_for(self.reader.read(1 << 16), deadline - time.monotonic())
            if not data:
                raise ConnectionError("closed")
            self.buf += data
        n = struct.unpack_from(">I", self.buf)[0]
        raw = bytes(self.buf[:n])
        del self.buf[:n]
        return decode(raw)

    async def closed(self, timeout: float = 10.0) -> bool:
        try:
            while True:
                await self.frame(timeout)
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


# --- every opcode -------------------------------------------------------------------------------

@pytest.mark.process
async def test_ping_is_echoed(broker: SbpBroker) -> None:
    r = await Raw.open(broker)
    r.writer.write(encode(Opcode.PING, 0, 42, b"\x01\x02", b"payload"))
    f = await r.frame()
    assert (f.opcode, f.flags, f.stream_id) == (Opcode.PING, LAST, 42)
    assert (bytes(f.header), bytes(f.payload)) == (b"\x01\x02", b"payload")
    r.close()


@pytest.mark.process
async def test_heartbeat_is_answered_with_its_fields(broker: SbpBroker) -> None:
    hb = HeartbeatRequestT()
    hb.clientId, hb.clientRole = "c-1", 1
    hb.rangeServer = RangeServerT()
    hb.rangeServer.serverId, hb.rangeServer.advertiseAddr = 7, "h:1"
    async with await client(broker) as c:
        t = await one(c, Opcode.HEARTBEAT, hb)
    assert (t.clientId, t.clientRole, t.rangeServer.serverId, t.status.code) == (b"c-1", 1, 7, 0)


@pytest.mark.process
async def test_allocate_id(broker: SbpBroker) -> None:
    async with await client(broker) as c:
        req = AllocateIdRequestT()
        req.host = "127.0.0.1"
        t = await one(c, Opcode.ALLOCATE_ID, req)
        assert (t.status.code, t.id) == (0, 0)  # no cluster.peers: this broker is server 0
        req.host = "elsewhere.example"
        t = await one(c, Opcode.ALLOCATE_ID, req)
        assert (t.status.code, t.id) == (ErrorCode.NOT_SUPPORTED, -1)


@pytest.mark.process
async def test_streams_create_describe_update_delete(broker: SbpBroker) -> None:
    async with await client(broker) as c:
        sid = await c.create_stream("s-admin", retention_ms=3_600_000)
        assert sid == stream_id("s-admin")
        with pytest.raises(SbpError) as e:
            await c.create_stream("s-admin")
        assert e.value.code == ErrorCode.STREAM_EXISTS
        d = await c.describe_stream("s-admin")
        assert (d.streamId, d.name, d.replicaNums, d.retentionPeriodMs) == (
            sid, b"s-admin", 1, 3_600_000)
        upd = UpdateStreamsRequestT()
        s = StreamT()
        s.streamId, s.retentionPeriodMs = sid, 5
        upd.streams = [s]
        t = await one(c, Opcode.UPDATE_STREAMS, upd)
        r = t.updateResponses[0]
        assert r.status.code == ErrorCode.NOT_SUPPORTED
        assert r.updatedStream.retentionPeriodMs == 3_600_000  # as it is
        await c.delete_stream("s-admin")
        with pytest.raises(SbpError) as e:
            await c.describe_stream("s-admin")
        assert e.value.code == ErrorCode.STREAM_NOT_FOUND
        with pytest.raises(SbpError) as e:
            await c.delete_stream("s-admin")
        assert e.value.code == ErrorCode.STREAM_NOT_FOUND


@pytest.mark.process
async def test_ranges(broker: SbpBroker) -> None:
    async with await client(broker) as c:
        await c.create_stream("s-ranges")
        await c.append("s-ranges", [b"a", b"b", b"c"])
        sid = stream_id("s-ranges")
        (rng,) = await c.list_ranges("s-ranges")
        assert (rng.streamId, rng.rangeIndex, rng.startOffset, rng.nextOffset, rng.endOffset) == (
            sid, 0, 0, 3, -1)
        (server,) = rng.servers
        assert server.isPrimary and text(server.server.advertiseAddr) == f"127.0.0.1:{broker.sbp_port}"

        owner = RangeOwnerT()
        owner.rangeServer = RangeServerT()
        owner.rangeServer.serverId = 0
        lr = ListRangesRequestT()
        lr.rangeOwners = [owner]
        t = await one(c, Opcode.LIST_RANGES, lr)
        assert sid in [r.streamId for r in t.listResponses[0].ranges]

        rid, bad = RangeIdT(), RangeIdT()
        rid.streamId, rid.rangeIndex = sid, 0
        bad.streamId, bad.rangeIndex = sid, 1
        dr = DescribeRangesRequestT()
        dr.ranges = [rid, bad]
        t = await one(c, Opcode.DESCRIBE_RANGE, dr)
        ok, missing = t.describeResponses
        assert (ok.status.code, ok.range.nextOffset) == (0, 3)
        assert missing.status.code == ErrorCode.RANGE_NOT_FOUND and missing.range is None

        seal = SealRangesRequestT()
        seal.ranges = [rid]
        t = await one(c, Opcode.SEAL_RANGE, seal)
        r = t.sealResponses[0]
        assert r.status.code == ErrorCode.NOT_SUPPORTED and r.range.endOffset == -1  # not sealed
        await c.append("s-ranges", [b"d"])  # still writable

        sync = SyncRangesRequestT()
        sr = StreamRangesT()
        sr.streamId = sid
        sync.streamRanges = [sr]
        t = await one(c, Opcode.SYNC_RANGES, sync)
        assert t.syncResponses[0].status.code == ErrorCode.NOT_SUPPORTED

        cr = CreateRangeRequestT()
        cr.range = RangeInfoT()
        cr.range.streamId = sid
        t = await one(c, Opcode.CREATE_RANGE, cr)
        assert t.status.code == ErrorCode.NOT_SUPPORTED and t.range.nextOffset == 4

        trim = TrimStreamsRequestT()
        ts = TrimmedStreamT()
        ts.streamId, ts.trimOffset = sid, 2
        trim.trimmedStreams = [ts]
        t = await one(c, Opcode.TRIM_STREAMS, trim)
        r = t.trimResponses[0]
        assert r.status.code == ErrorCode.NOT_SUPPORTED and r.range.startOffset == 0

        unknown = RangeOwnerT()
        unknown.streamId = stream_id("no-such-stream")
        lr.rangeOwners = [unknown]
        t = await one(c, Opcode.LIST_RANGES, lr)
        assert t.listResponses[0].status.code == ErrorCode.STREAM_NOT_FOUND


@pytest.mark.process
async def test_placement_driver_opcodes(broker: SbpBroker) -> None:
    async with await client(broker) as c:
        rm = ReportMetricsRequestT()
        rm.diskInRate = 5
        t = await one(c, Opcode.REPORT_METRICS, rm)
        assert t.status.code == ErrorCode.NOT_SUPPORTED
        assert text(t.rangeServer.advertiseAddr) == f"127.0.0.1:{broker.sbp_port}"
        t = await one(c, Opcode.DESCRIBE_PD_CLUSTER, DescribePlacementDriverClusterRequestT())
        (node,) = t.cluster.nodes
        assert t.status.code == 0 and node.isLeader
        assert text(node.advertiseAddr) == f"127.0.0.1:{broker.sbp_port}"


# --- APPEND -------------------------------------------------------------------------------------

@pytest.mark.process
async def test_append_to_several_streams_in_one_frame(broker: SbpBroker) -> None:
    async with await client(broker) as c:
        for name in ("s-a1", "s-a2"):
            await c.create_stream(name)
        got = await c.append_many([("s-a1", b"x0"), ("s-a2", b"y0"), ("s-missing", b"z"),
                                   ("s-a1", b"x1"), ("s-a2", b"y1"), ("s-a1", b"")])
        assert got == [(0, 0, ""), (0, 0, ""), (-1, ErrorCode.STREAM_NOT_FOUND,
                                                f"no stream has id {stream_id('s-missing')}"),
                       (1, 0, ""), (1, 0, ""), (2, 0, "")]
        assert await c.fetch("s-a1", 0) == [(0, b"x0"), (1, b"x1"), (2, b"")]
        assert await c.fetch("s-a2", 0) == [(0, b"y0"), (1, b"y1")]


@pytest.mark.process
async def test_append_answers_every_index_over_frames(broker: SbpBroker) -> None:
    """Many streams, many batches: each request index answered exactly once, the last frame
    with the end flag, offsets consecutive per stream."""
    async with await client(broker) as c:
        names = [f"s-many-{i}" for i in range(5)]
        for n in names:
            await c.create_stream(n)
        batches = [(names[i % 5], b"b%d" % i) for i in range(500)]
        sid = c.send(Opcode.APPEND, _append_header(batches), b"".join(b for _, b in batches))
        seen: list[int] = []
        frames = 0
        async for f in c.frames(sid):
            frames += 1
            from streamlet.sbp.fbs.AppendResponse import AppendResponseT
            t = read(AppendResponseT, f.header)
            seen += [r.requestIndex for r in t.appendResponses]
        assert sorted(seen) == list(range(500))
        for n in names:
            got = await c.fetch(n, 0)
            assert [o for o, _ in got] == list(range(100))


@pytest.mark.process
async def test_long_runs_cut_over_chunks_answer_each_batch_with_its_offset(
        broker: SbpBroker) -> None:
    """Runs of one frame's batches to one stream are published as one batch each; the core
    cuts a long run over several chunks (each placed and confirmed on its own): every request
    index still gets the offset its own bytes are at."""
    async with await client(broker) as c:
        for n in ("s-run-a", "s-run-b"):
            await c.create_stream(n)
        batches = ([("s-run-a", b"a%d" % i) for i in range(3000)]
                   + [("s-run-b", b"b%d" % i) for i in range(7)]
                   + [("s-run-a", b"c%d" % i) for i in range(2000)])
        got = await c.append_many(batches)
        assert all(code == 0 for _, code, _ in got)
        stored = {}
        for name in ("s-run-a", "s-run-b"):
            offset = 0
            while records := await c.fetch(name, offset, batch_max_bytes=20_000):
                stored.update({(name, o): b for o, b in records})
                offset = records[-1][0] + 1
        assert {(name, offset): body for (name, body), (offset, _, _) in
                zip(batches, got, strict=True)} == stored
        assert [o for o, _, _ in got[:3000]] == list(range(3000))


def _runs_header(runs: list[tuple[str, int, list[bytes]]]) -> Any:
    from streamlet.sbp.fbs.AppendRequest import AppendRequestT
    from streamlet.sbp.fbs.AppendRun import AppendRunT
    req = AppendRequestT()
    req.appendRuns = []
    for name, first, batches in runs:
        run = AppendRunT()
        run.streamId, run.requestIndex = stream_id(name), first
        run.batchLengths = [len(b) for b in batches]
        req.appendRuns.append(run)
    return req


@pytest.mark.process
async def test_append_runs_are_answered_a_result_per_run(broker: SbpBroker) -> None:
    """AppendRuns (streamlet's): a run of batches to one stream, its request indexes following
    each other; answered with a result per run confirmed (batch_count), a long run over
    several chunks in several results, every index once, at the offset its bytes are at; a
    run to an unknown stream refused index by index. The document's form and runs in one
    request, or lengths that are not the payload's: a system error, nothing appended."""
    from streamlet.sbp.fbs.AppendResponse import AppendResponseT
    async with await client(broker) as c:
        for n in ("s-runs-a", "s-runs-b"):
            await c.create_stream(n)
        a1 = [b"a%d" % i for i in range(3000)]
        b1 = [b"b%d" % i for i in range(7)]
        a2 = [b"c%d" % i for i in range(20)]
        ghost = [b"g", b"h"]
        runs = [("s-runs-a", 0, a1), ("s-runs-b", 3000, b1), ("nowhere", 3007, ghost),
                ("s-runs-a", 3009, a2)]
        sid = c.send(Opcode.APPEND, _runs_header(runs), b"".join(b"".join(r[2]) for r in runs))
        answered: dict[int, tuple[int, int]] = {}
        results = 0
        async for f in c.frames(sid):
            for r in read(AppendResponseT, f.header).appendResponses:
                results += 1
                for k in range(r.batchCount):
                    assert r.requestIndex + k not in answered
                    answered[r.requestIndex + k] = (r.status.code, r.baseOffset + k
                                                    if r.baseOffset >= 0 else -1)
        assert sorted(answered) == list(range(3029)) and results < 20
        assert {answered[3007], answered[3008]} == {(ErrorCode.STREAM_NOT_FOUND, -1)}
        sent = ([("s-runs-a", b) for b in a1] + [("s-runs-b", b) for b in b1]
                + [("nowhere", b) for b in ghost] + [("s-runs-a", b) for b in a2])
        for name in ("s-runs-a", "s-runs-b"):
            stored = dict(await c.fetch(name, 0, batch_max_bytes=1 << 22))
            mine = {answered[i][1]: body for i, (n, body) in enumerate(sent) if n == name}
            assert stored == mine and all(answered[i][0] == 0 for i, (n, _) in enumerate(sent)
                                          if n == name)

        both = _runs_header([("s-runs-b", 0, [b"x"])])
        both.appendRequests = _append_header([("s-runs-b", b"y")]).appendRequests
        short = _runs_header([("s-runs-b", 0, [b"xyz"])])
        for header, payload in [(both, b"xy"), (short, b"xy")]:
            with pytest.raises(SbpError) as e:
                async for _ in c.frames(c.send(Opcode.APPEND, header, payload)):
                    pass
            assert e.value.code == ErrorCode.INVALID_REQUEST
        assert len(await c.fetch("s-runs-b", 0)) == 7  # nothing appended
        assert await c.append("s-runs-b", [b"1", b"22"]) == [7, 8]
        assert await c.append("s-runs-b", [b"3"], runs=False) == [9]


def _append_header(batches: list[tuple[str, bytes]]) -> Any:
    from streamlet.sbp.fbs.AppendInfo import AppendInfoT
    from streamlet.sbp.fbs.AppendRequest import AppendRequestT
    req = AppendRequestT()
    infos = []
    for i, (name, data) in enumerate(batches):
        info = AppendInfoT()
        info.streamId, info.requestIndex, info.batchLength = stream_id(name), i, len(data)
        infos.append(info)
    req.appendRequests = infos
    return req


@pytest.mark.process
async def test_append_with_lengths_not_the_payload_is_a_system_error(broker: SbpBroker) -> None:
    async with await client(broker) as c:
        await c.create_stream("s-badlen")
        sid = c.send(Opcode.APPEND, _append_header([("s-badlen", b"abc")]), b"ab")
        with pytest.raises(SbpError) as e:
            async for _ in c.frames(sid):
                pass
        assert e.value.code == ErrorCode.INVALID_REQUEST
        assert await c.ping(b"still") == b"still"


# --- FETCH --------------------------------------------------------------------------------------

@pytest.mark.process
async def test_fetch_waits_for_min_bytes_and_not_longer(broker: SbpBroker) -> None:
    async with await client(broker) as c, await client(broker) as w:
        await c.create_stream("s-poll")
        fut = asyncio.ensure_future(c.fetch("s-poll", 0, max_wait_ms=30_000, min_bytes=10))
        await w.append("s-poll", [b"12345"])  # 5 of 10 bytes: not yet
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # polled: it must stay unanswered all along
            assert not fut.done()
            await asyncio.sleep(0.05)
        started = time.monotonic()
        await w.append("s-poll", [b"67890"])
        got = await asyncio.wait_for(fut, 10)
        assert got == [(0, b"12345"), (1, b"67890")]
        assert time.monotonic() - started < 5  # as soon as they arrive, not at the deadline


@pytest.mark.process
async def test_fetch_answers_at_the_deadline(broker: SbpBroker) -> None:
    async with await client(broker) as c:
        await c.create_stream("s-deadline")
        await c.append("s-deadline", [b"abc"])
        started = time.monotonic()
        got = await c.fetch("s-deadline", 0, max_wait_ms=600, min_bytes=1000)
        took = time.monotonic() - started
        assert got == [(0, b"abc")]  # what there is, at the deadline
        assert 0.5 < took < 10
        started = time.monotonic()
        assert await c.fetch("s-deadline", 1, max_wait_ms=300, min_bytes=1) == []
        assert 0.25 < time.monotonic() - started < 10


@pytest.mark.process
async def test_fetch_many_streams_answered_per_stream_as_data_arrives(broker: SbpBroker) -> None:
    async with await client(broker) as c, await client(broker) as w:
        for n in ("s-f1", "s-f2"):
            await c.create_stream(n)
        await w.append("s-f1", [b"one"])
        req = _fetch_header([("s-f1", 0), ("s-f2", 0)], max_wait_ms=30_000, min_bytes=1)
        sid = c.send(Opcode.FETCH, req)
        frames = c.frames(sid)
        first = await asyncio.wait_for(anext(frames), 10)  # s-f1 at once, not the end
        assert not first.is_end
        from streamlet.sbp.fbs.FetchResponse import FetchResponseT
        t = read(FetchResponseT, first.header)
        assert [(r.requestIndex, r.baseOffset) for r in t.fetchResponses] == [(0, 0)]
        assert bytes(first.payload) == b"one"
        await w.append("s-f2", [b"two"])
        second = await asyncio.wait_for(anext(frames), 10)
        assert second.is_end and bytes(second.payload) == b"two"


@pytest.mark.process
async def test_a_large_answer_comes_in_pieces_and_the_next_fetch_goes_on(
        broker: SbpBroker) -> None:
    """An answer of 1.3 MB goes in several frames (the broker cuts the next piece while the
    client takes one), the end flag on the last only, within batch_max_bytes; fetches from
    where it ended, and from elsewhere, give the right records."""
    from streamlet.sbp.fbs.FetchResponse import FetchResponseT
    bodies = [bytes([i % 256]) * 1000 for i in range(1500)]
    async with await client(broker) as c:
        await c.create_stream("s-pieces")
        for i in range(0, len(bodies), 100):
            await c.append("s-pieces", bodies[i : i + 100])
        limit = 1_300_000
        sid = c.send(Opcode.FETCH, _fetch_header([("s-pieces", 0)], 0, 0, limit))
        frames = [f async for f in c.frames(sid)]
        assert len(frames) >= 3 and [f.is_end for f in frames] == [False] * (len(frames) - 1) + [True]
        got: list[tuple[int, bytes]] = []
        for f in frames:
            at = 0
            for r in read(FetchResponseT, f.header).fetchResponses:
                assert (r.requestIndex, r.status.code) == (0, 0)
                got.append((r.baseOffset, bytes(f.payload[at : at + r.batchLength])))
                at += r.batchLength
            assert at == len(f.payload)
        assert got == list(enumerate(bodies))[: len(got)] and len(got) == limit // 1000
        rest = await c.fetch("s-pieces", len(got), batch_max_bytes=1 << 22)  # where it ended
        assert rest == list(enumerate(bodies))[len(got) :]
        assert await c.fetch("s-pieces", 7, batch_max_bytes=3000) == list(enumerate(bodies))[7:10]


@pytest.mark.process
async def test_run_results_describe_the_same_batches_as_a_result_each(
        broker: SbpBroker) -> None:
    """run_results (streamlet's): a run of consecutive offsets is one result with its batches'
    lengths; the records are those of the document's form, a result per batch, whatever the
    limit, across a gap in the offsets (a tracking record, written by a RabbitMQ-protocol
    consumer's StoreOffset) and over pieces."""
    from streamlet.sbp.fbs.FetchResponse import FetchResponseT
    bodies = [bytes([i % 256]) * (1 + i % 700) for i in range(2000)]
    async with await client(broker) as c:
        await c.create_stream("s-runs")
        await c.append("s-runs", bodies[:1000])
        async with RConsumer(broker.host, broker.port, username="guest",
                             password="guest") as rc:
            await rc.store_offset("s-runs", "reader", 10)
        second = await c.append("s-runs", bodies[1000:])
        assert second[0] > 1000  # the tracking record took an offset
        stored = list(zip(list(range(1000)) + second, bodies, strict=True))
        for start, limit in [(0, 1 << 22), (990, 20_000), (5, 1), (second[0], 300_000)]:
            at = next(k for k, (o, _) in enumerate(stored) if o >= start)
            per_batch = await c.fetch("s-runs", start, batch_max_bytes=limit, run_results=False)
            runs = await c.fetch("s-runs", start, batch_max_bytes=limit, length_prefixed=False)
            prefixed = await c.fetch("s-runs", start, batch_max_bytes=limit)
            assert runs == per_batch == stored[at : at + len(per_batch)] and per_batch
            # length-prefixed: chunks go whole from the file, so an answer may end at a
            # chunk's end short of the limit rather than read part of the next one
            assert prefixed and prefixed == per_batch[: len(prefixed)]
            assert len(prefixed) == len(per_batch) or limit < sum(map(len, bodies))
        sid = c.send(Opcode.FETCH, _fetch_header([("s-runs", 0)], 0, 0, 1 << 22, runs=True))
        results = [r for f in [f async for f in c.frames(sid)]
                   for r in read(FetchResponseT, f.header).fetchResponses]
        offsets = [r.baseOffset + k for r in results for k in range(len(r.batchLengths))]
        assert offsets == [o for o, _ in stored]
        assert any(r.baseOffset == second[0] for r in results)  # the gap starts a run
        assert all(sum(r.batchLengths) == r.batchLength for r in results)
        assert len(results) < 20  # a result per run and piece, not per batch
        # length-prefixed: a count per run, no lengths; each frame's payload its runs' bytes
        header = _fetch_header([("s-runs", 0)], 0, 0, 1 << 22, runs=True)
        header.lengthPrefixed = True
        frames = [f async for f in c.frames(c.send(Opcode.FETCH, header))]
        results = [r for f in frames for r in read(FetchResponseT, f.header).fetchResponses]
        offsets = [r.baseOffset + k for r in results for k in range(r.batchCount)]
        assert offsets == [o for o, _ in stored] and not any(r.batchLengths for r in results)
        assert any(r.baseOffset == second[0] for r in results)
        assert sum(r.batchLength for r in results) == sum(len(f.payload) for f in frames) == (
            sum(4 + len(b) for _, b in stored))


def _fetch_header(wanted: list[tuple[str, int]], max_wait_ms: int, min_bytes: int,
                  batch_max_bytes: int = 1 << 20, runs: bool = False) -> Any:
    from streamlet.sbp.fbs.FetchInfo import FetchInfoT
    from streamlet.sbp.fbs.FetchRequest import FetchRequestT
    req = FetchRequestT()
    req.maxWaitMs, req.minBytes, req.runResults = max_wait_ms, min_bytes, runs
    infos = []
    for i, (name, offset) in enumerate(wanted):
        f = FetchInfoT()
        f.streamId, f.requestIndex, f.fetchOffset, f.batchMaxBytes = (
            stream_id(name), i, offset, batch_max_bytes)
        infos.append(f)
    req.fetchRequests = infos
    return req


@pytest.mark.process
async def test_fetch_batch_max_bytes(broker: SbpBroker) -> None:
    async with await client(broker) as c:
        await c.create_stream("s-max")
        await c.append("s-max", [b"a" * 10, b"b" * 10, b"c" * 10, b"d" * 50])
        assert [o for o, _ in await c.fetch("s-max", 0, batch_max_bytes=25)] == [0, 1]
        assert [o for o, _ in await c.fetch("s-max", 1, batch_max_bytes=30)] == [1, 2]
        assert [o for o, _ in await c.fetch("s-max", 0, batch_max_bytes=80)] == [0, 1, 2, 3]
        got = await c.fetch("s-max", 3, batch_max_bytes=5)  # bigger than the limit: still one
        assert got == [(3, b"d" * 50)]
        with pytest.raises(SbpError) as e:
            await c.fetch("s-max", 99)
        assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


# --- GOAWAY, bad input ----------------------------------------------------------------------------

@pytest.mark.process
async def test_goaway_from_the_client_finishes_then_closes(broker: SbpBroker) -> None:
    async with await client(broker) as c:
        await c.create_stream("s-goaway")
    r = await Raw.open(broker)
    r.writer.write(encode(Opcode.FETCH, 0, 5, write(_fetch_header([("s-goaway", 0)], 30_000, 1))))
    r.writer.write(encode(Opcode.GOAWAY, 0, 6, write(GoAwayT())))
    r.writer.write(encode(Opcode.PING, 0, 7))  # after GOAWAY: not taken
    f = await r.frame()  # the pending fetch ends now, with what there is (nothing)
    assert (f.opcode, f.stream_id, f.is_end) == (Opcode.FETCH, 5, True)
    f = await r.frame()
    assert f.opcode == Opcode.GOAWAY and not f.is_response
    assert await r.closed()


@pytest.mark.process
async def test_broker_shutdown_sends_goaway(tmp_path: Path) -> None:
    b = sbp_broker(tmp_path)
    b.start()
    try:
        r = await Raw.open(b)
        r.writer.write(encode(Opcode.PING, 0, 1))
        await r.frame()
        b.proc.send_signal(15)  # type: ignore[union-attr]
        f = await r.frame()
        assert f.opcode == Opcode.GOAWAY and f.flags == 0
        assert text(read(GoAwayT, f.header).status.message) == "the broker closes the connection"
        assert await r.closed()
    finally:
        b.stop()


@pytest.mark.process
async def test_bad_input_is_answered_or_closed_without_harm(broker: SbpBroker) -> None:
    async with await client(broker) as other:
        await other.create_stream("s-bad")
        r = await Raw.open(broker)
        good = encode(Opcode.PING, 0, 1, b"", b"ok")
        r.writer.write(good[:4] + b"\x16" + good[5:])  # wrong magic: discarded
        r.writer.write(encode(0x0999, 0, 2))  # unknown opcode: discarded
        r.writer.write(encode(Opcode.APPEND, 0, 3, b"\xff" * 9))  # unreadable header
        r.writer.write(encode(Opcode.PING, 0, 4)[:12] + b"\x07\x00\x00\x00")  # format 7
        r.writer.write(good)
        f = await r.frame()
        assert (f.stream_id, f.flags) == (3, LAST | Flags.SYSTEM_ERROR)
        assert read(SystemErrorResponseT, f.header).status.code == ErrorCode.INVALID_REQUEST
        f = await r.frame()
        assert (f.stream_id, f.flags & Flags.SYSTEM_ERROR) == (4, Flags.SYSTEM_ERROR)
        f = await r.frame()
        assert (f.opcode, f.stream_id, bytes(f.payload)) == (Opcode.PING, 1, b"ok")
        r.writer.write(struct.pack(">I", 8) + b"\x17" * 12)  # a length under 16: GOAWAY, close
        f = await r.frame()
        assert f.opcode == Opcode.GOAWAY
        assert await r.closed()
        big = await Raw.open(broker)
        big.writer.write(struct.pack(">I", 1 << 30))  # past max_frame_bytes
        assert (await big.frame()).opcode == Opcode.GOAWAY
        assert await big.closed()
        assert await other.append("s-bad", [b"fine"]) == [0]  # the other connection serves


# --- across protocols ------------------------------------------------------------------------------

@pytest.mark.process
@pytest.mark.parametrize("form", [{}, {"length_prefixed": False}, {"runs": False}],
                         ids=["length-prefixed", "batch-lengths", "a-table-each"])
async def test_sbp_append_read_by_rstream_and_the_client(broker: SbpBroker,
                                                         form: dict[str, bool]) -> None:
    """Every APPEND form stores a batch as one message, as rstream and the project's RabbitMQ
    client read it."""
    name = f"x-sbp-to-rmq-{sorted(form)}"
    bodies = [b"sbp-%04d" % i + b"x" * (i % 7) for i in range(300)]
    async with await client(broker) as c:
        await c.create_stream(name)
        offsets = []
        for i in range(0, 300, 100):
            offsets += await c.append(name, bodies[i : i + 100], **form)
    assert offsets == list(range(300))
    got = await rstream_consume(broker, name, ConsumerOffsetSpecification(OffsetType.FIRST), 300)
    assert got == list(enumerate(bodies))
    async with await connect(broker.host, broker.port) as rc:
        consumer = await rc.consumer(name, offset="first")
        seen = []
        async for m in consumer:
            seen.append((m.offset, m.body))
            if len(seen) == 300:
                break
    assert seen == list(enumerate(bodies))


@pytest.mark.process
@pytest.mark.parametrize("form", [{}, {"length_prefixed": False}, {"run_results": False}],
                         ids=["length-prefixed", "run-results", "a-result-each"])
async def test_rstream_publish_fetched_by_sbp(broker: SbpBroker, form: dict[str, bool]) -> None:
    """Every FETCH form gives RabbitMQ-protocol messages as rstream reads them, those of a
    sub-entry batch (read by the general reader, not cut in C) included."""
    name = f"x-rmq-to-sbp-{len(form)}-{sorted(form)}"
    async with RProducer(broker.host, broker.port, username="guest", password="guest") as rp:
        await rp.create_stream(name)
        await rp.send_batch(name, [RawMessage(b"rs-%d" % i) for i in range(200)])
        await rp.send_sub_entry(name, [RawMessage(b"sub-%d" % i) for i in range(5)])
    want = await rstream_consume(broker, name, ConsumerOffsetSpecification(OffsetType.FIRST), 205)
    got: list[tuple[int, bytes]] = []
    async with await client(broker) as c:
        while len(got) < 205:
            start = got[-1][0] + 1 if got else 0
            got += await c.fetch(name, start, max_wait_ms=5000, min_bytes=1,
                                 batch_max_bytes=500, **form)
        assert got == want
        # within a large budget the chunk of simple entries goes whole (from the file, when
        # length-prefixed), the one with the sub-entry batch by the general reader
        assert await c.fetch(name, 0, **form) == want


@pytest.mark.process
def test_cli_produce_and_consume_over_sbp(broker: SbpBroker) -> None:
    base = [sys.executable, "-m", "streamlet"]
    port = ["--host", broker.host, "--port", str(broker.sbp_port), "--protocol", "sbp"]
    done = subprocess.run([*base, "produce", "x-cli", "--create", *port], input=b"one\ntwo\n",
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([*base, "consume", "x-cli", "--count", "2", *port],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"0\tone\n1\ttwo\n"
    done = subprocess.run([*base, "consume", "x-cli", "--offset", "last", *port],
                          capture_output=True, timeout=60)
    assert done.returncode == 2 and b"--offset first or a number" in done.stderr


@pytest.mark.parametrize(("toml", "port", "error"), [
    ("[listeners.sbp]\nport = 5555\n", None, None),
    ("", 6000, None),  # serve --sbp-port: loopback
    ("[listeners.sbp]\nport = 5555\n", 0, None),  # 0 turns it off
    ('[listeners.sbp]\nport = 5555\nhost = "0.0.0.0"\n', None, "no authentication"),
    ("[listeners.sbp]\nport = 5555\nmax_frame_bytes = 8\n", None, "max_frame_bytes"),
])
def test_listener_config(tmp_path: Path, toml: str, port: int | None, error: str | None) -> None:
    from streamlet.broker.config.model import ConfigError
    from streamlet.broker.protocols import load
    path = tmp_path / "c.toml"
    path.write_text(toml)
    if error is not None:
        with pytest.raises(ConfigError, match=error):
            load(path, sbp_port=port)
        return
    cfg = load(path, sbp_port=port)
    got = [(lst.host, lst.port) for lst in cfg.listeners if lst.protocol == "sbp"]
    want = [] if port == 0 else [("127.0.0.1", port or 5555)]
    assert got == want
