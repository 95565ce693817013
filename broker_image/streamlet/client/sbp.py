"""An SBP client (docs/protocols/sbp.md), asyncio. Requests are frames under stream identifiers
of their own, in flight together; each collects its response frames up to the one with the
response-end flag.

    async with await SbpClient.connect("127.0.0.1", 5555) as c:
        offsets = await c.append("events", [b"batch-1", b"batch-2"])

Streams are named (their SBP id is streamlet.sbp.stream_id(name)). An append the broker does not
lead is refused NOT_PRIMARY (SbpError); ``follow`` finds the primary (LIST_RANGES) and goes there.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Iterable
from typing import Any

from ..sbp import (
    LAST,
    ErrorCode,
    Flags,
    Frame,
    Malformed,
    Opcode,
    read,
    response_class,
    stream_id,
)
from ..sbp.fbs.AppendInfo import AppendInfoT
from ..sbp.fbs.AppendRequest import AppendRequestT
from ..sbp.fbs.AppendRun import AppendRunT
from ..sbp.fbs.CreateStreamsRequest import CreateStreamsRequestT
from ..sbp.fbs.DeleteStreamsRequest import DeleteStreamsRequestT
from ..sbp.fbs.DescribeStreamsRequest import DescribeStreamsRequestT
from ..sbp.fbs.FetchInfo import FetchInfoT
from ..sbp.fbs.FetchRequest import FetchRequestT
from ..sbp.fbs.ListRangesRequest import ListRangesRequestT
from ..sbp.fbs.RangeOwner import RangeOwnerT
from ..sbp.fbs.Stream import StreamT
from ..sbp.fbs.SystemErrorResponse import SystemErrorResponseT
from ..sbp.headers import text
from ..sbp.session import SbpSession
from .socket import SocketClient

#: a response's frames, or the error that ended the connection
_Item = Frame | BaseException

_U32 = struct.Struct(">I")


class SbpError(Exception):
    """The broker answered with an error status (or a system error frame)."""

    def __init__(self, code: int, message: str) -> None:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"SBP error {code} ({name}): {message}")
        self.code = code
        self.message = message


def _check(st: Any) -> None:
    if st is not None and st.code != ErrorCode.NONE:
        raise SbpError(st.code, text(st.message))


class SbpClient(SocketClient):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self._session = SbpSession()
        self._pending: dict[int, asyncio.Queue[_Item]] = {}
        self.start_reading()

    @property
    def goaway(self) -> str | None:
        """The broker's GOAWAY, once it came: why it ends the connection."""
        return self._session.goaway

    async def _read(self) -> None:
        error: BaseException = ConnectionError("the broker closed the connection")
        try:
            while data := await self.reader.read(1 << 16):
                for frame in self._session.receive(data):
                    queue = self._pending.get(frame.stream_id)
                    if queue is not None:
                        queue.put_nowait(frame)
        except (OSError, Malformed, ValueError) as e:
            error = e
        if self.goaway is not None:
            error = ConnectionError(f"the broker said GOAWAY: {self.goaway}")
        for queue in self._pending.values():
            queue.put_nowait(error)

    def send(self, opcode: int, header: Any = None, payload: bytes = b"",
             flags: int = Flags.NONE) -> int:
        """Send a request frame; returns its stream identifier (``header``: a table or bytes)."""
        if self._task.done():
            raise ConnectionError("the connection is closed")
        sid, data = self._session.request(opcode, header, payload, flags)
        self._pending[sid] = asyncio.Queue()
        self.writer.write(data)
        return sid

    async def frames(self, sid: int) -> AsyncIterator[Frame]:
        """The response frames of request ``sid``, up to the one with the end flag; a system
        error frame raises SbpError."""
        queue = self._pending[sid]
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item.is_system_error:
                    _check(read(SystemErrorResponseT, item.header).status)
                yield item
                if item.is_end:
                    return
        finally:
            self._pending.pop(sid, None)

    async def request(self, opcode: int, header: Any = None, payload: bytes = b"") -> list[Any]:
        """Send a request, wait for all its answers: (header table, payload) per frame."""
        sid = self.send(opcode, header, payload)
        cls = response_class(opcode)
        out = []
        async for frame in self.frames(sid):
            table = None if cls is None else read(cls, frame.header)
            out.append((table, bytes(frame.payload)))
        return out

    # --- the operations ------------------------------------------------------------------------

    async def ping(self, payload: bytes = b"") -> bytes:
        (_, echoed), = await self.request(Opcode.PING, None, payload)
        return echoed  # type: ignore[no-any-return]

    async def create_stream(self, name: str, retention_ms: int = 0) -> int:
        s = StreamT()
        s.name, s.replicaNums, s.retentionPeriodMs = name, 1, retention_ms
        req = CreateStreamsRequestT()
        req.timeoutMs, req.streams = 10_000, [s]
        (table, _), = await self.request(Opcode.CREATE_STREAMS, req)
        result = table.createResponses[0]
        _check(result.status)
        return int(result.stream.streamId)

    async def delete_stream(self, name: str) -> None:
        s = StreamT()
        s.streamId = stream_id(name)
        req = DeleteStreamsRequestT()
        req.streams = [s]
        (table, _), = await self.request(Opcode.DELETE_STREAMS, req)
        _check(table.deleteResponses[0].status)

    async def describe_stream(self, name: str) -> Any:
        req = DescribeStreamsRequestT()
        req.streamIds = [stream_id(name)]
        (table, _), = await self.request(Opcode.DESCRIBE_STREAMS, req)
        result = table.describeResponses[0]
        _check(result.status)
        return result.stream

    async def list_ranges(self, name: str) -> list[Any]:
        owner = RangeOwnerT()
        owner.streamId = stream_id(name)
        req = ListRangesRequestT()
        req.rangeOwners = [owner]
        (table, _), = await self.request(Opcode.LIST_RANGES, req)
        result = table.listResponses[0]
        _check(result.status)
        return list(result.ranges or [])

    async def append_many(self, batches: Iterable[tuple[str, bytes]],
                          timeout_ms: int = 10_000) -> list[tuple[int, int, str]]:
        """Append record batches to streams in one frame: per batch, in request order, (offset,
        status code, message); answers may come over several frames, in any order."""
        infos, payload = [], []
        for i, (name, data) in enumerate(batches):
            info = AppendInfoT()
            info.streamId, info.requestIndex, info.batchLength = stream_id(name), i, len(data)
            infos.append(info)
            payload.append(data)
        req = AppendRequestT()
        req.timeoutMs, req.appendRequests = timeout_ms, infos
        return await self._append(req, b"".join(payload), len(infos))

    async def _append(self, req: AppendRequestT, payload: bytes, n: int
                      ) -> list[tuple[int, int, str]]:
        got: dict[int, tuple[int, int, str]] = {}
        for table, _ in await self.request(Opcode.APPEND, req, payload):
            for r in table.appendResponses or []:
                st = r.status
                code, message = (st.code, text(st.message)) if st else (0, "")
                for k in range(r.batchCount):  # streamlet's: an AppendRun's answered batches
                    got[r.requestIndex + k] = (r.baseOffset + k if r.baseOffset >= 0 else -1,
                                               code, message)
        return [got.get(i, (-1, ErrorCode.UNKNOWN, "no answer")) for i in range(n)]

    async def append(self, name: str, batches: list[bytes], timeout_ms: int = 10_000,
                     runs: bool = True, length_prefixed: bool = True) -> list[int]:
        """Append record batches to one stream; their offsets (SbpError for the first refused).
        ``runs``: as one AppendRun (streamlet's, answered as a run), else a table per batch;
        with ``length_prefixed`` (streamlet's too) each batch goes behind its length in the
        payload, which the broker stores as it arrives."""
        if runs:
            run = AppendRunT()
            run.streamId, run.requestIndex = stream_id(name), 0
            req = AppendRequestT()
            req.timeoutMs, req.appendRuns = timeout_ms, [run]
            if length_prefixed:
                req.lengthPrefixed, run.batchCount = True, len(batches)
                payload = b"".join(p for b in batches for p in (_U32.pack(len(b)), b))
            else:
                run.batchLengths = [len(b) for b in batches]
                payload = b"".join(batches)
            answers = await self._append(req, payload, len(batches))
        else:
            answers = await self.append_many(((name, b) for b in batches), timeout_ms)
        out = []
        for offset, code, message in answers:
            if code != ErrorCode.NONE:
                raise SbpError(code, message)
            out.append(offset)
        return out

    async def fetch(self, name: str, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 0,
                    batch_max_bytes: int = 1 << 20, run_results: bool = True,
                    length_prefixed: bool = True) -> list[tuple[int, bytes]]:
        """The record batches of ``name`` from ``offset`` (at most ``batch_max_bytes``, one at
        least), as (offset, bytes); a long poll of ``max_wait_ms`` for ``min_bytes``."""
        got = await self.fetch_many([(name, offset)], max_wait_ms=max_wait_ms,
                                    min_bytes=min_bytes, batch_max_bytes=batch_max_bytes,
                                    run_results=run_results, length_prefixed=length_prefixed)
        return got[0]

    async def fetch_many(self, wanted: list[tuple[str, int]], *, max_wait_ms: int = 0,
                         min_bytes: int = 0, batch_max_bytes: int = 1 << 20,
                         run_results: bool = True, length_prefixed: bool = True
                         ) -> list[list[tuple[int, bytes]]]:
        """One FETCH for several (stream, offset): the records of each, in ``wanted``'s order.
        ``run_results`` (streamlet's) has a run of batches described by one result and their
        lengths, or with ``length_prefixed`` (streamlet's too) by one result and their count,
        each batch in the payload behind its length; without ``run_results`` each batch has a
        result of its own (the document's form)."""
        infos = []
        for i, (name, offset) in enumerate(wanted):
            f = FetchInfoT()
            f.streamId, f.requestIndex, f.fetchOffset = stream_id(name), i, offset
            f.batchMaxBytes = batch_max_bytes
            infos.append(f)
        req = FetchRequestT()
        req.maxWaitMs, req.minBytes, req.fetchRequests = max_wait_ms, min_bytes, infos
        req.runResults = run_results
        req.lengthPrefixed = run_results and length_prefixed
        out: list[list[tuple[int, bytes]]] = [[] for _ in wanted]
        for table, payload in await self.request(Opcode.FETCH, req):
            at = 0
            for r in table.fetchResponses or []:
                _check(r.status)
                got = out[r.requestIndex]
                if req.lengthPrefixed:
                    at = _prefixed(got, r.baseOffset, r.batchCount, r.batchLength, payload, at)
                    continue
                lengths = [int(n) for n in r.batchLengths] if r.batchLengths is not None else []
                if not lengths and (r.batchLength or r.baseOffset >= 0):
                    lengths = [r.batchLength]  # a result per batch
                if sum(lengths) != r.batchLength:
                    raise SbpError(ErrorCode.UNKNOWN, f"the broker's batch lengths add up to "
                                   f"{sum(lengths)}, not {r.batchLength}")
                for k, n in enumerate(lengths):
                    got.append((r.baseOffset + k, payload[at : at + n]))
                    at += n
        return out


def _prefixed(got: list[tuple[int, bytes]], offset: int, count: int, size: int, payload: bytes,
              at: int) -> int:
    """A length-prefixed run's ``count`` batches from ``payload[at:]`` (``size`` bytes) into
    ``got``; where the next run starts."""
    end = at + size
    for k in range(count):
        if end - at < 4 or (n := _U32.unpack_from(payload, at)[0]) > end - at - 4:
            raise SbpError(ErrorCode.UNKNOWN, f"batch {k} of a run of {count} is cut short")
        got.append((offset + k, payload[at + 4 : at + 4 + n]))
        at += 4 + n
    if at != end:
        raise SbpError(ErrorCode.UNKNOWN, f"a run of {count} batches holds {end - at} bytes more")
    return end


async def follow(host: str, port: int, name: str) -> SbpClient:
    """A client connected to the primary of ``name``'s range (LIST_RANGES at host:port)."""
    async with await SbpClient.connect(host, port) as c:
        ranges = await c.list_ranges(name)
    for r in ranges:
        for s in r.servers or []:
            if s.isPrimary:
                h, _, p = text(s.server.advertiseAddr).rpartition(":")
                return await SbpClient.connect(h, int(p))
    raise SbpError(ErrorCode.NOT_PRIMARY, f"no primary known for {name!r}")


__all__ = ["LAST", "SbpClient", "SbpError", "follow"]
