"""SBP's stream, range and placement driver opcodes, answered from what this broker knows
(docs/protocols/sbp.md): a stream is one range (index 0) whose servers are its members, its
leader the primary. What streamlet does not do (seal, create, sync or trim a range on request,
change a stream's settings, take load reports) is answered NOT_SUPPORTED with the state as it
is, never pretended.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from ...core.names import valid_stream_name
from ...core.registry import LimitReached
from ...core.streams import Stream
from ...sbp import ErrorCode, Opcode, status, stream_id
from ...sbp.fbs.AllocateIdRequest import AllocateIdRequestT
from ...sbp.fbs.AllocateIdResponse import AllocateIdResponseT
from ...sbp.fbs.CreateRangeResponse import CreateRangeResponseT
from ...sbp.fbs.CreateStreamResult import CreateStreamResultT
from ...sbp.fbs.CreateStreamsRequest import CreateStreamsRequestT
from ...sbp.fbs.CreateStreamsResponse import CreateStreamsResponseT
from ...sbp.fbs.DeleteStreamResult import DeleteStreamResultT
from ...sbp.fbs.DeleteStreamsRequest import DeleteStreamsRequestT
from ...sbp.fbs.DeleteStreamsResponse import DeleteStreamsResponseT
from ...sbp.fbs.DescribePlacementDriverClusterResponse import (
    DescribePlacementDriverClusterResponseT,
)
from ...sbp.fbs.DescribeRangesRequest import DescribeRangesRequestT
from ...sbp.fbs.DescribeRangesResponse import DescribeRangesResponseT
from ...sbp.fbs.DescribeRangesResult import DescribeRangesResultT
from ...sbp.fbs.DescribeStreamResult import DescribeStreamResultT
from ...sbp.fbs.DescribeStreamsRequest import DescribeStreamsRequestT
from ...sbp.fbs.DescribeStreamsResponse import DescribeStreamsResponseT
from ...sbp.fbs.HeartbeatRequest import HeartbeatRequestT
from ...sbp.fbs.HeartbeatResponse import HeartbeatResponseT
from ...sbp.fbs.ListRangesRequest import ListRangesRequestT
from ...sbp.fbs.ListRangesResponse import ListRangesResponseT
from ...sbp.fbs.ListRangesResult import ListRangesResultT
from ...sbp.fbs.PlacementDriverCluster import PlacementDriverClusterT
from ...sbp.fbs.PlacementDriverNode import PlacementDriverNodeT
from ...sbp.fbs.RangeInfo import RangeInfoT as RangeT
from ...sbp.fbs.ReportMetricsResponse import ReportMetricsResponseT
from ...sbp.fbs.SealRangesRequest import SealRangesRequestT
from ...sbp.fbs.SealRangesResponse import SealRangesResponseT
from ...sbp.fbs.SealRangesResult import SealRangesResultT
from ...sbp.fbs.Stream import StreamT
from ...sbp.fbs.SyncRangesRequest import SyncRangesRequestT
from ...sbp.fbs.SyncRangesResponse import SyncRangesResponseT
from ...sbp.fbs.SyncRangesResult import SyncRangesResultT
from ...sbp.fbs.TrimStreamResult import TrimStreamResultT
from ...sbp.fbs.TrimStreamsRequest import TrimStreamsRequestT
from ...sbp.fbs.TrimStreamsResponse import TrimStreamsResponseT
from ...sbp.fbs.UpdateStreamResult import UpdateStreamResultT
from ...sbp.fbs.UpdateStreamsRequest import UpdateStreamsRequestT
from ...sbp.fbs.UpdateStreamsResponse import UpdateStreamsResponseT
from ...sbp.headers import ints, text
from ..arguments import parse_create_arguments
from ..directory import Placement
from .places import Names, RangeFacts, Server, range_of, range_server

if TYPE_CHECKING:
    from ...core.registry import Streams
    from ..server import Broker


class AdminConnection(Protocol):
    """What these opcodes use of their connection (connection.SbpConnection): the broker, the
    streams by SBP id, the range servers, and the answer."""

    broker: Broker
    streams: Streams
    names: Names

    def stream_name(self, sid: int) -> str | None: ...
    def local_stream(self, sid: int) -> Stream | tuple[int, str]: ...
    def me(self) -> Server: ...
    def server_at(self, address: tuple[str, int]) -> Server: ...
    def answer(self, opcode: int, sid: int, table: Any,
               payload: list[memoryview | bytes] | None = None, end: bool = True) -> None: ...

log = logging.getLogger("streamlet.broker")

Frame = Any
OK = ErrorCode.NONE


def _top(table: Any, **lists: Any) -> Any:
    """A response header with throttle_time_ms 0 (streamlet does not throttle: TCP's
    back-pressure does) and a top-level status NONE."""
    table.throttleTimeMs = 0
    table.status = status()
    for k, v in lists.items():
        setattr(table, k, v)
    return table


# --- what the broker knows of a stream --------------------------------------------------------

def facts(conn: AdminConnection, sid: int) -> RangeFacts | tuple[int, str]:
    """Stream ``sid``'s range facts: held here (offsets, members), or named by the directory
    (its servers only), or why not."""
    name = conn.stream_name(sid)
    if name is None:
        if conn.names.ambiguous(sid):
            return ErrorCode.INVALID_REQUEST, f"stream id {sid} names two streams"
        return ErrorCode.STREAM_NOT_FOUND, f"no stream has id {sid}"
    cfg = conn.broker.config
    stream = conn.streams.get(name)
    directory = conn.broker.directory()
    placement = directory.placement("/", name)
    if stream is not None:
        own = conn.broker.members.placement(stream, cfg.advertised)
        if own is not None and (placement is None or own.epoch >= placement.epoch):
            placement = own
    if stream is not None and placement is None and not stream.sealed:
        return RangeFacts(sid, stream.log.first_offset, stream.commit_end, False, conn.me())
    if placement is None:
        leader = directory.leader("/", name)
        if leader is None:
            if stream is None:
                return ErrorCode.STREAM_NOT_FOUND, f"no stream has id {sid}"
            placement = Placement(0, None)  # sealed here, the directory not telling where
        else:
            placement = Placement(0, leader)
    primary = (None if placement.leader is None else
               conn.me() if placement.leader == cfg.advertised else
               conn.server_at(placement.leader))
    secondaries = tuple(conn.me() if a == cfg.advertised else conn.server_at(a)
                        for a in placement.replicas)
    if stream is None:
        return RangeFacts(sid, None, None, False, primary, secondaries)
    return RangeFacts(sid, stream.log.first_offset, stream.commit_end,
                      stream.sealed and primary != conn.me(), primary, secondaries)


def describe(stream: Stream, name: str, replicas: int) -> StreamT:
    t = StreamT()
    t.streamId, t.name = stream_id(name), name
    t.replicaNums = replicas
    t.retentionPeriodMs = stream.effective.max_age_ms or 0  # 0: kept until size retention
    return t


def replicas_of(conn: AdminConnection, stream: Stream) -> int:
    member = conn.broker.members.get(stream)
    return 1 if member is None else len(member.state.members)


def _range(conn: AdminConnection, sid: int) -> tuple[RangeT | None, int, str | None]:
    got = facts(conn, sid)
    if isinstance(got, tuple):
        return None, got[0], got[1]
    return range_of(got), OK, None


# --- the connection's own state --------------------------------------------------------------

def on_heartbeat(conn: AdminConnection, frame: Frame, req: HeartbeatRequestT) -> None:
    t = HeartbeatResponseT()
    t.clientId, t.clientRole, t.rangeServer = req.clientId, req.clientRole, req.rangeServer
    t.status = status()
    conn.answer(Opcode.HEARTBEAT, frame.stream_id, t)


def on_allocate_id(conn: AdminConnection, frame: Frame, req: AllocateIdRequestT) -> None:
    """Server ids are configured (cluster.peers' order, a pod's ordinal), not allocated: the id
    of the broker at ``host`` is answered, a host that is none of them NOT_SUPPORTED. ``host``
    may be a range server's address (host:SBP port), which tells apart brokers sharing a host
    (``cluster up`` on one machine); a bare host shared by several gives the first."""
    cfg = conn.broker.config
    host = text(req.host)
    t = AllocateIdResponseT()
    hosts = [h for h, _ in cfg.peers]
    addrs = [conn.server_at(p).addr for p in cfg.peers]
    if host in addrs:
        t.id, t.status = addrs.index(host), status()
    elif host in hosts:
        t.id, t.status = hosts.index(host), status()
    elif not cfg.peers and host in ("", cfg.advertised[0], cfg.host):
        t.id, t.status = conn.me().server_id, status()
    else:
        t.id = -1
        t.status = status(ErrorCode.NOT_SUPPORTED,
                          f"{host!r} is not a broker of this cluster: streamlet's server ids "
                          "are configured (cluster.peers), not allocated")
    conn.answer(Opcode.ALLOCATE_ID, frame.stream_id, t)


# --- ranges -----------------------------------------------------------------------------------

def on_list_ranges(conn: AdminConnection, frame: Frame, req: ListRangesRequestT) -> None:
    results = []
    for owner in req.rangeOwners or []:
        r = ListRangesResultT()
        if owner.rangeServer is not None:
            r.streamId = -1
            server = Server(owner.rangeServer.serverId, text(owner.rangeServer.advertiseAddr))
            ranges = []
            for name in list(conn.streams.streams):
                got = facts(conn, stream_id(name))
                if isinstance(got, RangeFacts) and any(
                        s is not None and (s.server_id == server.server_id or s.addr == server.addr)
                        for s in (got.primary, *got.secondaries)):
                    ranges.append(range_of(got))
            r.status, r.ranges = status(), ranges
        else:
            r.streamId = owner.streamId
            rng, code, why = _range(conn, owner.streamId)
            r.status, r.ranges = status(code, why), [] if rng is None else [rng]
        results.append(r)
    conn.answer(Opcode.LIST_RANGES, frame.stream_id, _top(ListRangesResponseT(),
                                                           listResponses=results))


def on_seal_ranges(conn: AdminConnection, frame: Frame, req: SealRangesRequestT) -> None:
    results = []
    for rid in req.ranges or []:
        r = SealRangesResultT()
        r.streamId = rid.streamId
        r.range, code, why = _range(conn, rid.streamId)
        r.status = status(code, why) if code != OK else status(
            ErrorCode.NOT_SUPPORTED, "a streamlet range is sealed only when its stream moves "
            "to another broker (the operator's move); it is answered as it is")
        results.append(r)
    conn.answer(Opcode.SEAL_RANGE, frame.stream_id, _top(SealRangesResponseT(),
                                                          sealResponses=results))


def on_sync_ranges(conn: AdminConnection, frame: Frame, req: SyncRangesRequestT) -> None:
    results = []
    for sr in req.streamRanges or []:
        r = SyncRangesResultT()
        r.streamId = sr.streamId
        rng, code, why = _range(conn, sr.streamId)
        r.ranges = [] if rng is None else [rng]
        r.status = status(code, why) if code != OK else status(
            ErrorCode.NOT_SUPPORTED, "streamlet's brokers learn ranges from replication and the "
            "stream directory, not from SYNC_RANGES; the range as it is")
        results.append(r)
    conn.answer(Opcode.SYNC_RANGES, frame.stream_id, _top(SyncRangesResponseT(),
                                                           syncResponses=results))


def on_create_range(conn: AdminConnection, frame: Frame, req: Any) -> None:
    t = _top(CreateRangeResponseT())
    rng = req.range
    if rng is not None:
        t.range, code, why = _range(conn, rng.streamId)
        if code != OK:
            t.status = status(code, why)
            conn.answer(Opcode.CREATE_RANGE, frame.stream_id, t)
            return
    t.status = status(ErrorCode.NOT_SUPPORTED, "a streamlet stream is one range, made with the "
                      "stream (CREATE_STREAMS); the range as it is")
    conn.answer(Opcode.CREATE_RANGE, frame.stream_id, t)


def on_describe_ranges(conn: AdminConnection, frame: Frame, req: DescribeRangesRequestT) -> None:
    results = []
    for rid in req.ranges or []:
        r = DescribeRangesResultT()
        r.streamId = rid.streamId
        rng, code, why = _range(conn, rid.streamId)
        if rng is not None and rid.rangeIndex != 0:
            rng, code, why = None, ErrorCode.RANGE_NOT_FOUND, "a streamlet stream has range 0 only"
        r.range, r.status = rng, status(code, why)
        results.append(r)
    conn.answer(Opcode.DESCRIBE_RANGE, frame.stream_id, _top(DescribeRangesResponseT(),
                                                              describeResponses=results))


# --- streams ----------------------------------------------------------------------------------

def _create_one(conn: AdminConnection, want: StreamT) -> CreateStreamResultT:
    r = CreateStreamResultT()
    r.stream = want
    name = text(want.name) or f"sbp-{os.urandom(8).hex()}"
    want.name, want.streamId = name, stream_id(name)
    why = valid_stream_name(name)
    if why is not None:
        r.status = status(ErrorCode.INVALID_REQUEST, why)
        return r
    if want.replicaNums > 1:
        r.status = status(ErrorCode.NOT_SUPPORTED, "replicated streams are created with the "
                          "RabbitMQ protocol's Create (x-initial-cluster-size)")
        return r
    existing = conn.streams.get(name)
    if existing is not None:
        r.stream = describe(existing, name, replicas_of(conn, existing))
        r.status = status(ErrorCode.STREAM_EXISTS, f"stream {name!r} exists")
        return r
    other = conn.stream_name(want.streamId)
    if other is not None and other != name:
        r.status = status(ErrorCode.INVALID_REQUEST, f"{name!r} has the id of {other!r}")
        return r
    settings = parse_create_arguments({}, conn.broker.config.retention)
    if want.retentionPeriodMs > 0:
        settings = replace(settings, max_age_ms=want.retentionPeriodMs)
    try:
        stream = conn.streams.create(name, settings)
    except LimitReached as e:
        r.status = status(ErrorCode.LIMIT_REACHED, str(e))
        return r
    except OSError as e:
        log.error("create %r failed: %s", name, e)
        r.status = status(ErrorCode.STORAGE_ERROR, f"cannot create {name!r}: {e.strerror}")
        return r
    r.stream, r.status = describe(stream, name, 1), status()
    return r


def on_create_streams(conn: AdminConnection, frame: Frame, req: CreateStreamsRequestT) -> None:
    results = [_create_one(conn, s) for s in req.streams or []]
    conn.answer(Opcode.CREATE_STREAMS, frame.stream_id, _top(CreateStreamsResponseT(),
                                                              createResponses=results))


def on_delete_streams(conn: AdminConnection, frame: Frame, req: DeleteStreamsRequestT) -> None:
    results, gone = [], []
    vhost = conn.broker.vhosts["/"]
    for want in req.streams or []:
        r = DeleteStreamResultT()
        got = conn.local_stream(want.streamId)
        if isinstance(got, tuple):
            r.status = status(*got)
        elif conn.broker.members.get(got) is not None:
            r.status = status(ErrorCode.NOT_SUPPORTED, "a replicated stream is deleted with the "
                              "RabbitMQ protocol's Delete (on every member)")
        else:
            r.deletedStream = describe(got, got.name, 1)
            stream = conn.broker.delete_stream(vhost, got.name)  # files gone on return
            if stream is not None:
                gone.append(stream)
            r.status = status()
        results.append(r)
    conn.answer(Opcode.DELETE_STREAMS, frame.stream_id, _top(DeleteStreamsResponseT(),
                                                              deleteResponses=results))
    for stream in gone:  # the other connections are told after the answer
        conn.broker.stream_gone(stream)


def on_update_streams(conn: AdminConnection, frame: Frame, req: UpdateStreamsRequestT) -> None:
    results = []
    for want in req.streams or []:
        r = UpdateStreamResultT()
        got = conn.local_stream(want.streamId)
        if isinstance(got, tuple):
            r.status = status(*got)
        else:
            r.updatedStream = now = describe(got, got.name, replicas_of(conn, got))
            same = (want.replicaNums in (0, now.replicaNums)
                    and want.retentionPeriodMs in (0, now.retentionPeriodMs))
            r.status = status() if same else status(
                ErrorCode.NOT_SUPPORTED, "a stream's settings are fixed when it is created; the "
                "stream as it is")
        results.append(r)
    conn.answer(Opcode.UPDATE_STREAMS, frame.stream_id, _top(UpdateStreamsResponseT(),
                                                              updateResponses=results))


def on_describe_streams(conn: AdminConnection, frame: Frame, req: DescribeStreamsRequestT) -> None:
    results = []
    for sid in ints(req.streamIds):
        r = DescribeStreamResultT()
        got = conn.local_stream(sid)
        if isinstance(got, tuple):
            r.stream = StreamT()
            r.stream.streamId = sid
            r.status = status(*got)
        else:
            r.stream, r.status = describe(got, got.name, replicas_of(conn, got)), status()
        results.append(r)
    conn.answer(Opcode.DESCRIBE_STREAMS, frame.stream_id, _top(DescribeStreamsResponseT(),
                                                                describeResponses=results))


def on_trim_streams(conn: AdminConnection, frame: Frame, req: TrimStreamsRequestT) -> None:
    results = []
    for want in req.trimmedStreams or []:
        r = TrimStreamResultT()
        got = conn.local_stream(want.streamId)
        if isinstance(got, tuple):
            r.status = status(*got)
        else:
            r.trimmedStream = describe(got, got.name, replicas_of(conn, got))
            r.range, _, _ = _range(conn, want.streamId)
            r.status = status(ErrorCode.NOT_SUPPORTED, "streamlet trims by retention "
                              "(max_age, max_length_bytes), whole segments at a time; the "
                              "range as it is")
        results.append(r)
    conn.answer(Opcode.TRIM_STREAMS, frame.stream_id, _top(TrimStreamsResponseT(),
                                                            trimResponses=results))


# --- the placement driver ---------------------------------------------------------------------

def on_report_metrics(conn: AdminConnection, frame: Frame, req: Any) -> None:
    t = ReportMetricsResponseT()
    t.rangeServer = range_server(conn.me())
    t.status = status(ErrorCode.NOT_SUPPORTED, "streamlet places streams by its own rule "
                      "(fewest streams per broker): load reports are not used")
    conn.answer(Opcode.REPORT_METRICS, frame.stream_id, t)


def on_describe_pd_cluster(conn: AdminConnection, frame: Frame, req: Any) -> None:
    """Every streamlet broker answers range questions from the stream directory and its own
    members: each is a placement driver node, and the one asked leads for its client."""
    cfg = conn.broker.config
    nodes = []
    me = conn.me()
    for address in cfg.peers or (cfg.advertised,):
        server = me if address == cfg.advertised else conn.server_at(address)
        n = PlacementDriverNodeT()
        n.name, n.advertiseAddr, n.isLeader = f"broker-{server.server_id}", server.addr, server == me
        nodes.append(n)
    cluster = PlacementDriverClusterT()
    cluster.nodes = nodes
    conn.answer(Opcode.DESCRIBE_PD_CLUSTER, frame.stream_id,
                _top(DescribePlacementDriverClusterResponseT(), cluster=cluster))


HANDLERS: dict[int, Callable[[AdminConnection, Frame, Any], None]] = {
    Opcode.HEARTBEAT: on_heartbeat, Opcode.ALLOCATE_ID: on_allocate_id,
    Opcode.LIST_RANGES: on_list_ranges, Opcode.SEAL_RANGE: on_seal_ranges,
    Opcode.SYNC_RANGES: on_sync_ranges, Opcode.CREATE_RANGE: on_create_range,
    Opcode.DESCRIBE_RANGE: on_describe_ranges, Opcode.CREATE_STREAMS: on_create_streams,
    Opcode.DELETE_STREAMS: on_delete_streams, Opcode.UPDATE_STREAMS: on_update_streams,
    Opcode.DESCRIBE_STREAMS: on_describe_streams, Opcode.TRIM_STREAMS: on_trim_streams,
    Opcode.REPORT_METRICS: on_report_metrics, Opcode.DESCRIBE_PD_CLUSTER: on_describe_pd_cluster,
}
