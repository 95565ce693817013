"""SBP's extended headers: FlatBuffers tables (schema/sbp.fbs, Python generated into fbs/), read
and written through the generated object API. ``read`` turns any failure to read untrusted
bytes into Malformed; the rest of the package never touches flatbuffers' exceptions.

Error codes: the specification's (0-5) and streamlet's own from 100 (docs/protocols/sbp.md).
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any, TypeVar

import flatbuffers

from .fbs.AllocateIdRequest import AllocateIdRequestT
from .fbs.AllocateIdResponse import AllocateIdResponseT
from .fbs.AppendRequest import AppendRequestT
from .fbs.AppendResponse import AppendResponseT
from .fbs.CreateRangeRequest import CreateRangeRequestT
from .fbs.CreateRangeResponse import CreateRangeResponseT
from .fbs.CreateStreamsRequest import CreateStreamsRequestT
from .fbs.CreateStreamsResponse import CreateStreamsResponseT
from .fbs.DeleteStreamsRequest import DeleteStreamsRequestT
from .fbs.DeleteStreamsResponse import DeleteStreamsResponseT
from .fbs.DescribePlacementDriverClusterRequest import DescribePlacementDriverClusterRequestT
from .fbs.DescribePlacementDriverClusterResponse import DescribePlacementDriverClusterResponseT
from .fbs.DescribeRangesRequest import DescribeRangesRequestT
from .fbs.DescribeRangesResponse import DescribeRangesResponseT
from .fbs.DescribeStreamsRequest import DescribeStreamsRequestT
from .fbs.DescribeStreamsResponse import DescribeStreamsResponseT
from .fbs.FetchRequest import FetchRequestT
from .fbs.FetchResponse import FetchResponseT
from .fbs.GoAway import GoAwayT
from .fbs.HeartbeatRequest import HeartbeatRequestT
from .fbs.HeartbeatResponse import HeartbeatResponseT
from .fbs.ListRangesRequest import ListRangesRequestT
from .fbs.ListRangesResponse import ListRangesResponseT
from .fbs.ReportMetricsRequest import ReportMetricsRequestT
from .fbs.ReportMetricsResponse import ReportMetricsResponseT
from .fbs.SealRangesRequest import SealRangesRequestT
from .fbs.SealRangesResponse import SealRangesResponseT
from .fbs.Status import StatusT
from .fbs.SyncRangesRequest import SyncRangesRequestT
from .fbs.SyncRangesResponse import SyncRangesResponseT
from .fbs.SystemErrorResponse import SystemErrorResponseT
from .fbs.TrimStreamsRequest import TrimStreamsRequestT
from .fbs.TrimStreamsResponse import TrimStreamsResponseT
from .fbs.UpdateStreamsRequest import UpdateStreamsRequestT
from .fbs.UpdateStreamsResponse import UpdateStreamsResponseT
from .frame import Malformed, Opcode


class ErrorCode(IntEnum):
    # the specification's
    NONE = 0
    UNKNOWN = 1
    INVALID_REQUEST = 2
    UNSUPPORTED_VERSION = 3
    PD_NOT_LEADER = 5
    # streamlet's (docs/protocols/sbp.md)
    STREAM_NOT_FOUND = 101
    STREAM_EXISTS = 102
    #: this server does not hold the range's primary: LIST_RANGES says which does
    NOT_PRIMARY = 103
    RANGE_NOT_FOUND = 104
    #: FETCH below the stream's first offset (retention removed it)
    OFFSET_OUT_OF_RANGE = 105
    #: a limit of the broker (streams, frame size)
    LIMIT_REACHED = 106
    #: the stream could not be written (disk)
    STORAGE_ERROR = 107
    #: the request has no meaning in streamlet (docs/protocols/sbp.md says why, per opcode)
    NOT_SUPPORTED = 108
    TIMEOUT = 109


#: opcode -> (its request header's class, its response header's class); PING has no header
#: of its own (the PONG echoes it) and GOAWAY's is streamlet's GoAway both ways
HEADERS: dict[Opcode, tuple[type[Any], type[Any]]] = {
    Opcode.GOAWAY: (GoAwayT, GoAwayT),
    Opcode.HEARTBEAT: (HeartbeatRequestT, HeartbeatResponseT),
    Opcode.ALLOCATE_ID: (AllocateIdRequestT, AllocateIdResponseT),
    Opcode.APPEND: (AppendRequestT, AppendResponseT),
    Opcode.FETCH: (FetchRequestT, FetchResponseT),
    Opcode.LIST_RANGES: (ListRangesRequestT, ListRangesResponseT),
    Opcode.SEAL_RANGE: (SealRangesRequestT, SealRangesResponseT),
    Opcode.SYNC_RANGES: (SyncRangesRequestT, SyncRangesResponseT),
    Opcode.CREATE_RANGE: (CreateRangeRequestT, CreateRangeResponseT),
    Opcode.DESCRIBE_RANGE: (DescribeRangesRequestT, DescribeRangesResponseT),
    Opcode.CREATE_STREAMS: (CreateStreamsRequestT, CreateStreamsResponseT),
    Opcode.DELETE_STREAMS: (DeleteStreamsRequestT, DeleteStreamsResponseT),
    Opcode.UPDATE_STREAMS: (UpdateStreamsRequestT, UpdateStreamsResponseT),
    Opcode.DESCRIBE_STREAMS: (DescribeStreamsRequestT, DescribeStreamsResponseT),
    Opcode.TRIM_STREAMS: (TrimStreamsRequestT, TrimStreamsResponseT),
    Opcode.REPORT_METRICS: (ReportMetricsRequestT, ReportMetricsResponseT),
    Opcode.DESCRIBE_PD_CLUSTER: (DescribePlacementDriverClusterRequestT,
                                 DescribePlacementDriverClusterResponseT),
}

T = TypeVar("T")
_ROOT = struct.Struct("<I")


def read(cls: type[T], data: bytes | memoryview) -> T:
    """The table ``cls`` from the bytes of an extended header; an empty header reads as the
    table with every field at its default. Malformed when FlatBuffers cannot read it (the
    generated readers do no verification: any exception of theirs is a bad header)."""
    if not len(data):
        return cls()
    buf = bytes(data)
    try:
        pos = _ROOT.unpack_from(buf, 0)[0]
        if pos >= len(buf):
            raise ValueError(f"root offset {pos} past the header's {len(buf)} bytes")
        return cls.InitFromBuf(buf, pos)  # type: ignore[attr-defined,no-any-return]
    except Exception as e:  # untrusted bytes: whatever the generated reader trips on
        raise Malformed(f"an extended header FlatBuffers cannot read as {cls.__name__[:-1]}: "
                        f"{type(e).__name__}") from None


def request_class(opcode: int) -> type[Any] | None:
    got = HEADERS.get(Opcode(opcode)) if opcode in Opcode._value2member_map_ else None
    return None if got is None else got[0]


def response_class(opcode: int) -> type[Any] | None:
    got = HEADERS.get(Opcode(opcode)) if opcode in Opcode._value2member_map_ else None
    return None if got is None else got[1]


def write(table: Any) -> bytes:
    """A table object (the generated ``...T`` classes) as extended header bytes."""
    builder = flatbuffers.Builder(128)
    builder.Finish(table.Pack(builder))
    return bytes(builder.Output())


def status(code: int = ErrorCode.NONE, message: str | None = None) -> StatusT:
    s = StatusT()
    s.code = int(code)
    s.message = message
    return s


def system_error(code: int, message: str) -> bytes:
    """A SystemErrorResponse header: what a frame with the system error flag carries."""
    t = SystemErrorResponseT()
    t.status = status(code, message)
    return write(t)


def text(value: bytes | str | None) -> str:
    """A FlatBuffers string as Python text (the generated readers give bytes)."""
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def ints(value: Any) -> list[int]:
    """A FlatBuffers scalar vector (a list, or numpy's array when numpy is installed)."""
    if value is None or isinstance(value, int):  # the generated reader's 0: absent
        return []
    return [int(v) for v in value]
