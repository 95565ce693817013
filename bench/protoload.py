"""Load through MEGA, SBP and Reactive Streams IO, for the ``protocols`` workload.

Like bench/load.py, the clients cost little per message so the broker is what is measured: each
pipelines up to ``window`` unanswered requests (or elements of demand), encodes its frames once
and patches only what changes, and reads answers by their fixed layouts rather than decoding
them. Each job returns the dict bench/workers.py expects of a publish or consume job.
How each client does it: docs/performance.md#other-protocols-mega-and-rsio.
"""

from __future__ import annotations

import asyncio
import struct
import sys
import time
from array import array
from collections.abc import Awaitable, Callable
from typing import Any, cast

from streamlet.mega import MessageType, encode_request
from streamlet.rsio import (
    EXT_OFFSETS,
    VERSION,
    Hello,
    OnComplete,
    OnError,
    OnNext,
    Request,
    Subscribe,
    Subscribed,
    decode,
    encode,
    format_publisher,
    iter_frames,
)
from streamlet.rsio.codec import read_varint
from streamlet.sbp import PREFIX_SIZE, Flags, Malformed, Opcode, SbpSplitter, stream_id
from streamlet.sbp import decode as sbp_decode
from streamlet.sbp import encode as sbp_encode
from streamlet.sbp import read as sbp_read
from streamlet.sbp import write as sbp_write
from streamlet.sbp.fbs.AppendRequest import AppendRequestT
from streamlet.sbp.fbs.AppendResponse import AppendResponseT
from streamlet.sbp.fbs.AppendRun import AppendRunT
from streamlet.sbp.fbs.FetchInfo import FetchInfoT
from streamlet.sbp.fbs.FetchRequest import FetchRequestT
from streamlet.sbp.fbs.FetchResponse import FetchResponse
from streamlet.sbp.flat import Scalars
from streamlet.sbp.frame import PREFIX as SBP_PREFIX

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_SUB = 1  # the one subscriber id of a job (one byte on the wire)
_LITTLE = sys.byteorder == "little"


def body_of(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


class _Load(asyncio.BaseProtocol):
    """A connection that ends in ``done``; subclasses send in ``pump`` and count answers, and
    are a Protocol (data_received) or a BufferedProtocol: uvloop takes a protocol that is both
    for a plain one."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.paused = False
        self.started = 0.0
        self.finished = 0.0
        self.errors = 0
        self.server_errors: list[str] = []
        self.done: asyncio.Future[None] = loop.create_future()
        self.ready: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        for fut in (self.ready, self.done):
            if not fut.done():
                fut.set_exception(ConnectionError(f"the broker closed the connection ({exc})"))

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.pump()

    def start(self) -> None:
        self.started = time.monotonic()
        self.pump()

    def pump(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        if not self.done.done():
            self.finished = time.monotonic()
            self.done.set_result(None)


# --- MEGA ---------------------------------------------------------------------------------------


class _InPlace:
    """Reads in place for a buffered protocol: ``mem[r:w]`` was read and not taken yet; what a
    read leaves cut moves to the front once less than ``ROOM`` is left after it."""

    ROOM = 64 << 10

    def _reads(self, size: int) -> None:
        self.mem = bytearray(size)
        self.view = memoryview(self.mem)
        self.r = self.w = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self.mem) - self.w < self.ROOM:
            unread = self.w - self.r
            self.mem[:unread] = self.mem[self.r : self.w]
            self.r, self.w = 0, unread
        return self.view[self.w :]

    def take(self, buf: bytearray, pos: int, end: int) -> int:
        """Count the whole frames in ``buf[pos:end]``; where the first not whole starts."""
        raise NotImplementedError

    def _taken(self) -> None:
        """What was read is counted as far as it is whole."""
        self.r = self.take(self.mem, self.r, self.w)
        if self.r == self.w:
            self.r = self.w = 0


class _MegaPipeline(_InPlace, _Load, asyncio.BufferedProtocol):
    """``total`` requests of one layout, ``batch`` per write, at most ``window`` unanswered;
    answers read in place (a buffered protocol: no copy of them in the process).

    Each slot of the ring gets its correlation ids when built (slot k: k * batch + 1, ...),
    unique among the requests in flight (the ring holds more than the window); ``patch``
    changes what else a request needs. Answers are read as a block of one fixed layout while
    their flags and lengths say it holds, answer by answer from where it does not (an error,
    another length)."""

    BLOCK = 256

    def __init__(self, template: bytes, total: int, batch: int, window: int) -> None:
        super().__init__()
        self.total, self.batch = total, batch
        self.window = max(window, batch)
        self.stride = len(template)
        self.slots = [bytearray(template * batch) for _ in range(self.window // batch + 2)]
        for k, slot in enumerate(self.slots):
            for i in range(batch):
                _U32.pack_into(slot, i * self.stride, k * batch + i + 1)
        self.sent = 0
        self.answered = 0
        self.frames = 0
        self.blocks: dict[int, struct.Struct] = {}
        self._reads(1 << 20)
        self.ready.set_result(None)  # MEGA has no handshake

    def patch(self, slot: bytearray, first: int, n: int) -> None:
        """Make the first ``n`` requests of ``slot`` those of indexes ``first``.. (nothing to
        change by default: the correlation ids were set when the slot was built)."""

    def pump(self) -> None:
        if not self.started or self.transport is None:
            return
        out: list[bytes | bytearray] = []
        while (self.sent < self.total and self.sent - self.answered + self.batch <= self.window
               and not self.paused):
            n = min(self.batch, self.total - self.sent)
            slot = self.slots[self.frames % len(self.slots)]
            self.patch(slot, self.sent, n)
            out.append(slot if n == self.batch else bytes(slot[: n * self.stride]))
            self.sent += n
            self.frames += 1
        if out:  # the batches of one pump in one system call
            self.transport.writelines(out)

    def buffer_updated(self, nbytes: int) -> None:
        self.w += nbytes
        self._taken()
        if self.answered >= self.total:
            self.finish()
        else:
            self.pump()

    def feed(self, data: bytes) -> None:
        """Answers as if read from the socket (tests)."""
        while data:
            room = self.get_buffer(len(data))
            n = min(len(room), len(data))
            room[:n] = data[:n]
            data = data[n:]
            self.buffer_updated(n)

    def block(self, n: int, layout: str) -> struct.Struct:
        """The struct reading ``n`` answers of ``layout`` (made once per ``n``)."""
        got = self.blocks.get(n)
        if got is None:
            got = self.blocks[n] = struct.Struct(">" + layout * n)
        return got

    def take(self, buf: bytearray, pos: int, end: int) -> int:
        """Count the whole answers in ``buf[pos:end]``; where the first not whole starts."""
        raise NotImplementedError


class MegaProducer(_MegaPipeline):
    """PRODUCE ``total`` messages of ``size`` bytes; checks that the offsets answered are
    0..total-1 of an empty topic (by their sum and extremes: no per-answer set)."""

    def __init__(self, topic: str, total: int, size: int, batch: int = 100,
                 window: int = 20_000) -> None:
        super().__init__(encode_request(0, MessageType.PRODUCE, topic, 0, payload=body_of(size)),
                         total, batch, window)
        self.confirmed = 0
        self.offset_sum = 0
        self.max_offset = -1

    def take(self, buf: bytearray, pos: int, end: int) -> int:
        while (n := min((end - pos) // 21, self.BLOCK)) > 0:  # successes: 21 bytes each
            got = self.block(n, "4xB8xQ").unpack_from(buf, pos)  # flag, offset
            if got[0::2].count(1) != n:
                break  # an error among them: answer by answer
            offsets = got[1::2]
            self.offset_sum += sum(offsets)
            self.max_offset = max(self.max_offset, *offsets)
            self.confirmed += n
            self.answered += n
            pos += 21 * n
        unpack = _U64.unpack_from
        while end - pos >= 6:
            if buf[pos + 4] == 1:  # success: correlation, 1, timestamp, offset u64
                if end - pos < 21:
                    break
                off = unpack(buf, pos + 13)[0]
                self.offset_sum += off
                if off > self.max_offset:
                    self.max_offset = off
                self.confirmed += 1
                pos += 21
            else:  # error: correlation, 0, code
                self.errors += 1
                if len(self.server_errors) < 5:
                    self.server_errors.append(f"MEGA error {buf[pos + 5]}")
                pos += 6
            self.answered += 1
        return pos

    def offsets_ok(self) -> bool:
        n = self.confirmed
        return self.max_offset == n - 1 and self.offset_sum == n * (n - 1) // 2


class MegaConsumer(_MegaPipeline):
    """CONSUME offsets 0..total-1 of a topic, pipelined; counts the messages and their bytes
    (answers read in blocks while they carry messages of ``size`` bytes)."""

    def __init__(self, topic: str, total: int, batch: int = 100, window: int = 20_000,
                 size: int = 100) -> None:
        super().__init__(encode_request(0, MessageType.CONSUME, topic, 0, offset=0), total,
                         batch, window)
        self.size = size
        self.records = 0
        self.data_bytes = 0

    def patch(self, slot: bytearray, first: int, n: int) -> None:
        # the offset (the request's index) of each request, big-endian: its k-th bytes written
        # as one slice of every stride-th byte, four slice assignments in all
        offsets = array("I", range(first, first + n))
        if _LITTLE:
            offsets.byteswap()
        raw, stride = offsets.tobytes(), self.stride
        for k in range(4):
            slot[stride - 4 + k : n * stride : stride] = raw[k::4]

    def take(self, buf: bytearray, pos: int, end: int) -> int:
        size = self.size
        step = 17 + size
        length = _U32.pack(size)
        if (n := (end - pos) // step) > 0:
            # Every n-th byte sliced out in C: the flags all 1, the lengths all ``size``.
            stop = pos + n * step
            if buf[pos + 4 : stop : step].count(1) == n and all(
                    buf[pos + 13 + k : stop : step].count(length[k]) == n for k in range(4)):
                self.records += n
                self.data_bytes += n * size
                self.answered += n
                pos = stop
        unpack = _U32.unpack_from
        while end - pos >= 6:
            if buf[pos + 4] == 1:  # success: correlation, 1, timestamp, length u32, message
                if end - pos < 17:
                    break
                length = unpack(buf, pos + 13)[0]
                if end - pos < 17 + length:
                    break
                self.records += 1
                self.data_bytes += length
                pos += 17 + length
            else:
                self.errors += 1
                if len(self.server_errors) < 5:
                    self.server_errors.append(f"MEGA error {buf[pos + 5]}")
                pos += 6
            self.answered += 1
        return pos


# --- SBP ----------------------------------------------------------------------------------------

#: AppendResult: base_offset (slot 2; -1 in an error's answer), request_index (1), batch_count
#: (5, streamlet's: the batches of a run it answers)
_APPENDED = Scalars((2, "q", 0), (1, "i", 0), (5, "i", 1))


class _Sbp(_Load, asyncio.Protocol):
    """Response frames cut by SBP's splitter; ``answer`` gets each one's sid, flags, results."""

    def __init__(self) -> None:
        super().__init__()
        self.splitter = SbpSplitter(0)
        self.ready.set_result(None)  # SBP has no handshake

    def data_received(self, data: bytes) -> None:
        try:
            for raw in self.splitter.feed(data):
                frame = sbp_decode(raw)
                if frame is None or not frame.is_response:
                    continue
                if frame.is_system_error:
                    self.error(f"SBP system error on opcode {frame.opcode:#06x}")
                    continue
                self.answer(frame.stream_id, frame.is_end, bytes(frame.header), frame.payload)
        except Malformed as e:
            self.error(f"a malformed answer: {e}")
        if not self.done.done():
            self.pump()

    def error(self, why: str) -> None:
        self.errors += 1
        if len(self.server_errors) < 5:
            self.server_errors.append(why)
        self.finish()

    def answer(self, sid: int, end: bool, header: bytes, payload: bytes | memoryview) -> None:
        raise NotImplementedError


class SbpAppender(_Sbp):
    """APPEND ``total`` batches of ``size`` bytes to one stream, ``per_frame`` per frame, at most
    ``window`` unanswered; checks that the offsets answered are 0..total-1 of an empty stream."""

    def __init__(self, stream: str, total: int, size: int, per_frame: int = 100,
                 window: int = 20_000) -> None:
        super().__init__()
        self.total, self.per_frame = total, per_frame
        self.window = max(window, per_frame)
        self.sid = stream_id(stream)
        self.frames = {n: self._frame(n, size) for n in {per_frame, total % per_frame} if n}
        self.sent = 0
        self.answered = 0
        self.confirmed = 0
        self.offset_sum = 0
        self.max_offset = -1
        self.next_sid = 0

    def _frame(self, n: int, size: int) -> tuple[bytes, bytes]:
        run = AppendRunT()
        run.streamId, run.requestIndex, run.batchCount = self.sid, 0, n
        req = AppendRequestT()
        req.timeoutMs, req.appendRuns, req.lengthPrefixed = 10_000, [run], True
        raw = sbp_encode(Opcode.APPEND, 0, 0, sbp_write(req), (_U32.pack(size) + body_of(size)) * n)
        return raw[:8], raw[12:]  # the frame around its stream identifier

    def pump(self) -> None:
        if not self.started or self.transport is None:
            return
        while (self.sent < self.total and self.sent - self.answered + self.per_frame <= self.window
               and not self.paused):
            n = min(self.per_frame, self.total - self.sent)
            before, after = self.frames[n]
            self.next_sid += 1
            self.transport.writelines([before, _U32.pack(self.next_sid), after])
            self.sent += n

    def answer(self, sid: int, end: bool, header: bytes, payload: bytes | memoryview) -> None:
        offsets, _, counts = _APPENDED.read(header, 2)
        if not offsets:
            return
        if min(offsets) < 0:
            self.refused(header)
            return
        n = 0
        for base, count in zip(offsets, counts, strict=True):  # a result per run answered
            self.offset_sum += count * base + count * (count - 1) // 2
            self.max_offset = max(self.max_offset, base + count - 1)
            n += count
        self.confirmed += n
        self.answered += n
        if self.answered >= self.total:
            self.finish()

    def refused(self, header: bytes) -> None:
        for r in sbp_read(AppendResponseT, header).appendResponses or []:
            if r.status is not None and r.status.code:
                self.error(f"SBP APPEND status {r.status.code}: {r.status.message!r}")
                return

    def offsets_ok(self) -> bool:
        n = self.confirmed
        return self.max_offset == n - 1 and self.offset_sum == n * (n - 1) // 2


class SbpFetcher(_Load, asyncio.BufferedProtocol):
    """FETCH a stream from its first offset, ``batch_max_bytes`` at a time, each request from the
    offset after the last answered, until ``total`` batches came. Frames are read in place (a
    buffered protocol). It asks for length_prefixed
    (streamlet's: a result per run of consecutive offsets with its batch count, each batch in
    the payload behind its length, as the project's client does); each answer's results are
    checked (runs following each other from the offset asked, the results adding up to the
    payload), and the payload's bytes are counted and skipped, as the RabbitMQ consumer counts a
    chunk from its header and skips its data."""

    def __init__(self, stream: str, total: int, batch_max_bytes: int = 8 << 20) -> None:
        _Load.__init__(self)
        self.ready.set_result(None)  # SBP has no handshake
        self.sid = stream_id(stream)
        self.total, self.max_bytes = total, batch_max_bytes
        self.records = 0
        self.data_bytes = 0
        self.next_offset = 0
        self.asked = False
        self.mem = bytearray(1 << 20)
        self.view = memoryview(self.mem)
        self.r = self.w = 0
        self.skip = 0  # payload bytes still to come and be skipped

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self.mem) - self.w < 64 << 10:
            self._compact(64 << 10)
        return self.view[self.w :]

    def _compact(self, need: int) -> None:
        unread = self.w - self.r
        if unread + need > len(self.mem):
            new = bytearray(max(2 * len(self.mem), unread + need))
            new[:unread] = self.mem[self.r : self.w]
            self.mem, self.view = new, memoryview(new)  # the old view may still be held
        elif self.r:
            self.mem[:unread] = self.mem[self.r : self.w]
        self.r, self.w = 0, unread

    def buffer_updated(self, nbytes: int) -> None:
        self.w += nbytes
        while not self.done.done():
            if self.skip:
                k = min(self.skip, self.w - self.r)
                self.r += k
                self.skip -= k
                if self.skip:
                    break
            if self.w - self.r < PREFIX_SIZE:
                break
            length, _, _, flags, _, _ = SBP_PREFIX.unpack_from(self.mem, self.r)
            header_len = _U32.unpack_from(self.mem, self.r + 12)[0] & 0xFFFFFF
            if self.w - self.r < PREFIX_SIZE + header_len:
                self._compact(PREFIX_SIZE + header_len)
                break
            at = self.r + PREFIX_SIZE
            payload = length - PREFIX_SIZE - header_len
            self.answer(flags, self.view[at : at + header_len], payload)
            self.r = at + header_len
            self.skip = payload
        if self.r == self.w:
            self.r = self.w = 0
        self.pump()

    def pump(self) -> None:
        if not self.started or self.transport is None or self.asked or self.done.done():
            return
        info = FetchInfoT()
        info.streamId, info.requestIndex, info.fetchOffset = self.sid, 0, self.next_offset
        info.batchMaxBytes = self.max_bytes
        req = FetchRequestT()
        req.maxWaitMs, req.minBytes, req.fetchRequests = 1000, 1, [info]
        req.runResults = req.lengthPrefixed = True
        self.transport.write(sbp_encode(Opcode.FETCH, 0, 1, sbp_write(req)))
        self.asked = True

    def answer(self, flags: int, header: memoryview, payload: int) -> None:
        if flags & Flags.SYSTEM_ERROR:
            self.error("SBP FETCH: a system error")
            return
        answer = FetchResponse.GetRootAs(header, 0)
        n = size = 0
        for i in range(answer.FetchResponsesLength()):
            r = answer.FetchResponses(i)
            status = r.Status()
            if status is not None and status.Code():
                self.error(f"SBP FETCH: status {status.Code()}")
                return
            count, length = r.BatchCount(), r.BatchLength()
            if count and r.BaseOffset() != self.next_offset + n:
                self.error(f"SBP FETCH: a run from {r.BaseOffset()}, expected "
                           f"{self.next_offset + n}")
                return
            if length < 4 * count:
                self.error(f"SBP FETCH: {count} length-prefixed batches in {length} bytes")
                return
            n += count
            size += length
        if size != payload:
            self.error(f"SBP FETCH: results of {size} bytes, a payload of {payload}")
            return
        self.records += n
        self.data_bytes += size - 4 * n  # the batches' bytes, without their length prefixes
        self.next_offset += n
        if flags & Flags.RESPONSE_END:
            self.asked = False
        if self.records >= self.total:
            self.finish()

    def error(self, why: str) -> None:
        self.errors += 1
        if len(self.server_errors) < 5:
            self.server_errors.append(why)
        self.finish()


# --- RSIO ---------------------------------------------------------------------------------------


class _Rsio(_Load, asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.write(encode(Hello(VERSION, (EXT_OFFSETS,))))

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def control(self, msg: object) -> None:
        if isinstance(msg, OnError):
            self.errors += 1
            self.server_errors.append(msg.error)
            self.finish()


class RsioAppender(_Rsio):
    """Append ``total`` elements of ``size`` bytes to a stream, each sent within the broker's
    demand; done at the broker's onComplete (every element durable)."""

    def __init__(self, stream: str, total: int, size: int) -> None:
        super().__init__()
        self.stream, self.total = stream, total
        self.frame = encode(OnNext(_SUB, body_of(size)))
        self.demand = 0
        self.sent = 0
        self.granted_back = 0  # Requests after the first window: elements known durable
        self.window = 0
        self.confirmed = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.write(encode(Subscribe(format_publisher(self.stream, mode="append"), _SUB, 0)))

    def data_received(self, data: bytes) -> None:
        self.buf += data
        for msg in iter_frames(self.buf):
            if isinstance(msg, Subscribe):  # the broker subscribes to our publisher
                self.window = self.demand = msg.initial_demand
                self.write(encode(Subscribed(_SUB, 0)))
                if not self.ready.done():
                    self.ready.set_result(None)
            elif isinstance(msg, Request):
                self.demand += msg.demand
                self.granted_back += msg.demand
            elif isinstance(msg, OnComplete):  # after ours: every element is durable
                self.confirmed = self.sent
                self.finish()
            else:
                self.control(msg)
        self.pump()

    def pump(self) -> None:
        if not self.started or self.paused or self.done.done() or self.sent >= self.total:
            return
        n = min(self.demand, self.total - self.sent)
        if n <= 0:
            return
        self.demand -= n
        self.sent += n
        self.write(self.frame * n)
        if self.sent >= self.total:
            self.write(encode(OnComplete(_SUB)))


class RsioSubscriber(_InPlace, _Rsio, asyncio.BufferedProtocol):
    """Read ``total`` elements of a stream from its first offset (``end=now``), asking for
    ``demand`` at a time; done at onComplete. Counts elements and their bytes from the frames'
    type bytes without decoding them; with ``size`` (the elements' bytes, 0: unknown), a run
    of onNext frames of that size is checked and counted a byte column at a time. Reads land
    in place (a buffered protocol: no copy of them in the process)."""

    def __init__(self, stream: str, total: int, demand: int = 10_000, size: int = 0) -> None:
        super().__init__()
        self.stream, self.total, self.demand, self.size = stream, total, demand, size
        #: an onNext frame of ``size``: its first bytes (length, type, subscriber), its length
        self.head = encode(OnNext(_SUB, b"\0" * size))[:-size] if size else b""
        self.frame = len(self.head) + size
        self.records = 0
        self.data_bytes = 0
        self.taken = 0  # since the last request
        self.complete = False
        self._reads(4 << 20)

    ROOM = 256 << 10

    def buffer_updated(self, nbytes: int) -> None:
        self.w += nbytes
        if not self.ready.done():  # the broker's hello, before anything else
            self.data_received(bytes(self.mem[self.r : self.w]))
            self.r = self.w = 0
            return
        self._taken()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.ready.done():  # the broker's hello
            for _ in iter_frames(buf):
                self.ready.set_result(None)
                break
            return
        del buf[: self.take(buf, 0, len(buf))]

    def take(self, buf: bytearray, pos: int, end: int) -> int:
        """Count the whole frames in ``buf[pos:end]``; where the first not whole starts."""
        records = 0
        while pos < end:
            if self.frame and buf[pos : pos + len(self.head)] == self.head:
                n = self.run(buf, pos, end)
                if n:
                    records += n
                    self.data_bytes += n * self.size
                    pos += n * self.frame
                    continue
            size = buf[pos]
            at = pos + 1
            if size & 0x80:  # a longer length
                got = read_varint(buf, pos, end)
                if got is None:
                    break
                size, at = got
            if end - at < size:
                break
            kind = buf[at]
            if kind == 7:  # onNext: type, subscriber (1 byte), the element
                records += 1
                self.data_bytes += size - 2
            elif kind == 10:  # onNextPacked: count, then count * elementSize bytes
                count, data_at = read_varint(buf, at + 2, at + size) or (0, 0)
                records += count
                self.data_bytes += at + size - data_at
            elif kind == 12:  # onNextLastPart ends an element sent in parts
                records += 1
            elif kind == 8:
                self.complete = True
            elif kind not in (11, 32):  # parts and positions need no counting
                self.control(decode(bytes(buf[pos : at + size])))
            if kind == 11 or kind == 12:
                _, data_at = read_varint(buf, at + 2, at + size) or (0, 0)
                self.data_bytes += at + size - data_at
            pos = at + size
        self.records += records
        self.taken += records
        if self.complete:
            self.finish()
        elif self.taken >= self.demand // 2:
            self.write(encode(Request(_SUB, self.taken)))
            self.taken = 0
        return pos

    def run(self, buf: bytearray, pos: int, end: int) -> int:
        """How many whole onNext frames of ``size`` follow each other from ``pos``: each byte
        of the head checked down its column (one strided slice), up to the first frame whose
        head differs (each frame so checked starts where the one before ends)."""
        frame, head = self.frame, self.head
        n = (end - pos) // frame
        stop = pos + n * frame
        for i in range(len(head)):
            column = buf[pos + i : stop : frame]
            n = min(n, len(column) - len(column.lstrip(head[i : i + 1])))
            if not n:
                break
        return n

    def pump(self) -> None:
        self.write(encode(Subscribe(format_publisher(self.stream, end="now"), _SUB, self.demand)))


# --- the jobs -----------------------------------------------------------------------------------


async def _open(load: _Load, port: int) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_connection(lambda: load, "127.0.0.1", port)
    await asyncio.wait_for(load.ready, 30)


async def _run(load: _Load, port: int, ready: Callable[[], None],
               go: Callable[[], Awaitable[None]], timeout: float) -> bool:
    await _open(load, port)
    ready()
    await go()
    load.start()
    try:
        await asyncio.wait_for(asyncio.shield(load.done), timeout)
        return True
    except TimeoutError:
        return False
    finally:
        if load.transport is not None:
            load.transport.close()


def _published(load: Any, ok: bool, **extra: Any) -> dict[str, Any]:
    """What bench/workers.py expects of a publish job, from a producing ``load`` (``ok``: it
    finished in time)."""
    return {"sent": load.sent, "confirmed": load.confirmed, "errors": load.errors,
            "complete": ok, "t0": load.started, "t1": load.finished or time.monotonic(),
            **extra, "server_errors": load.server_errors}


def _consumed(load: Any, complete: bool) -> dict[str, Any]:
    """What bench/workers.py expects of a consume job, from a consuming ``load``."""
    return {"records": load.records, "chunks": 0, "data_bytes": load.data_bytes,
            "errors": load.errors, "complete": complete, "t0": load.started,
            "t1": load.finished or time.monotonic(), "server_errors": load.server_errors}


async def mega_produce(port: int, stream: str, p: dict[str, Any], ready: Callable[[], None],
                       go: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    load = MegaProducer(stream, p["count"], p["size"], p.get("batch", 100),
                        p.get("window", 20_000))
    ok = await _run(load, port, ready, go, p.get("timeout", 600))
    if ok and not load.offsets_ok():
        load.errors += 1
        load.server_errors.append("the offsets answered are not 0..n-1")
    return _published(load, ok)


async def mega_consume(port: int, stream: str, p: dict[str, Any], ready: Callable[[], None],
                       go: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    load = MegaConsumer(stream, p["count"], p.get("batch", 100), p.get("window", 20_000),
                        p.get("size", 100))
    ok = await _run(load, port, ready, go, p.get("timeout", 600))
    return _consumed(load, ok)


async def sbp_produce(port: int, stream: str, p: dict[str, Any], ready: Callable[[], None],
                      go: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    load = SbpAppender(stream, p["count"], p["size"], p.get("per_frame", 100),
                       p.get("window", 20_000))
    ok = await _run(load, port, ready, go, p.get("timeout", 600))
    if ok and not load.errors and not load.offsets_ok():
        load.errors += 1
        load.server_errors.append("the offsets answered are not 0..n-1")
    return _published(load, ok)


async def sbp_consume(port: int, stream: str, p: dict[str, Any], ready: Callable[[], None],
                      go: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    load = SbpFetcher(stream, p["count"], p.get("batch_max_bytes", 8 << 20))
    ok = await _run(load, port, ready, go, p.get("timeout", 600))
    return _consumed(load, ok)


async def rsio_produce(port: int, stream: str, p: dict[str, Any], ready: Callable[[], None],
                       go: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    load = RsioAppender(stream, p["count"], p["size"])
    ok = await _run(load, port, ready, go, p.get("timeout", 600))
    return _published(load, ok, window=load.window)


async def rsio_consume(port: int, stream: str, p: dict[str, Any], ready: Callable[[], None],
                       go: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    # demand as the RabbitMQ protocol's consumer's credit of 64 chunks holds at 100 B
    load = RsioSubscriber(stream, p["count"], p.get("demand", 250_000), p.get("size", 0))
    ok = await _run(load, port, ready, go, p.get("timeout", 600))
    return _consumed(load, ok and load.complete)


JOBS: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
    "mega_produce": mega_produce, "mega_consume": mega_consume,
    "rsio_produce": rsio_produce, "rsio_consume": rsio_consume,
    "sbp_produce": sbp_produce, "sbp_consume": sbp_consume,
}
