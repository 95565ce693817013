"""APPEND: each record batch of a frame becomes one message of its stream (one simple entry, as a
RabbitMQ Publish of that body stores it), published through a core Publisher as MEGA's PRODUCE
is; its answer goes out once the core confirms it (written, or on a majority of a replicated
stream), with the offset it got. Answers are grouped per confirm: one response frame per
request frame per confirm, the last with the response-end flag, so the batches of one frame
can be answered out of order and over several frames.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...core.batch import PublishBatch
from ...core.ports import Refusal
from ...core.streams import Publisher, Stream
from ...sbp import ErrorCode, Opcode, status
from ...sbp.fbs.AppendInfo import AppendInfoT
from ...sbp.fbs.AppendRequest import AppendRequestT
from ...sbp.fbs.AppendResponse import AppendResponseT
from ...sbp.fbs.AppendResult import AppendResultT

if TYPE_CHECKING:
    from .connection import SbpConnection

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

#: The core's reasons for refusing a publish, as SBP codes.
REFUSALS = {Refusal.GONE: (ErrorCode.STREAM_NOT_FOUND, "the stream was deleted"),
            Refusal.MOVED: (ErrorCode.NOT_PRIMARY, "the stream moved to another broker"),
            Refusal.WRITE_FAILED: (ErrorCode.STORAGE_ERROR, "the broker could not write it")}


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class Frame:
    """One APPEND request frame: its answers still to come."""

    stream_id: int  # the frame's (request-response) stream identifier
    remaining: int


@dataclass(slots=True)
class Waiting:
    frame: Frame
    info: AppendInfoT
    stream: Stream
    offset: int = -1  # from Session.placed


def result(info: AppendInfoT, code: int = ErrorCode.NONE, message: str | None = None,
           offset: int = -1) -> AppendResultT:
    r = AppendResultT()
    r.streamId, r.requestIndex = info.streamId, info.requestIndex
    r.baseOffset, r.streamAppendTimeMs = offset, now_ms()
    r.status = status(code, message)
    return r


@dataclass
class Appends:
    """A connection's appends in flight and its core Publishers (one per stream)."""

    conn: SbpConnection
    publishers: dict[Stream, Publisher] = field(default_factory=dict)
    by_id: dict[int, Publisher] = field(default_factory=dict)
    waiting: dict[int, Waiting] = field(default_factory=dict)  # publishing id -> batch
    next_publisher: int = 0
    next_id: int = 0

    def start(self, stream_sid: int, req: AppendRequestT, payload: memoryview) -> None:
        infos: list[AppendInfoT] = list(req.appendRequests or [])
        lengths = [i.batchLength for i in infos]
        if any(n < 0 for n in lengths) or sum(lengths) != len(payload):
            self.conn.system_error(Opcode.APPEND, stream_sid, ErrorCode.INVALID_REQUEST,
                                   f"batch lengths sum to {sum(lengths)}, the payload has "
                                   f"{len(payload)} bytes")
            return
        frame = Frame(stream_sid, len(infos))
        now: list[AppendResultT] = []
        at = 0
        for info in infos:
            data = payload[at : at + info.batchLength]
            at += info.batchLength
            got = self.conn.writable_stream(info.streamId)
            if isinstance(got, tuple):
                now.append(result(info, *got))
                continue
            self._publish(frame, info, got, data)
        if now or not infos:
            self.answer(frame, now)

    def _publish(self, frame: Frame, info: AppendInfoT, stream: Stream, data: memoryview) -> None:
        pub = self.publishers.get(stream)
        if pub is None:
            self.next_publisher += 1
            pub = Publisher(self.next_publisher, None, stream, self.conn, wants_offsets=True)
            self.publishers[stream] = self.by_id[pub.id] = pub
            stream.attach_publisher(pub)
        self.next_id += 1
        pid = self.next_id
        # Registered first: a refusal answers it during publish.
        self.waiting[pid] = Waiting(frame, info, stream)
        stream.publish(pub, PublishBatch(pub.id, 1, _U64.pack(pid),
                                         _U32.pack(len(data)) + bytes(data), 1, pid, pid, True))

    def answer(self, frame: Frame, results: list[AppendResultT]) -> None:
        """One response frame with ``results``; the last of its request has the end flag."""
        frame.remaining -= len(results)
        header = AppendResponseT()
        header.throttleTimeMs = 0
        header.status = status()
        header.appendResponses = results
        self.conn.answer(Opcode.APPEND, frame.stream_id, header, end=frame.remaining <= 0)

    def _answer_all(self, done: list[tuple[Waiting, AppendResultT]]) -> None:
        by_frame: dict[int, tuple[Frame, list[AppendResultT]]] = {}
        for w, r in done:
            by_frame.setdefault(id(w.frame), (w.frame, []))[1].append(r)
        for frame, results in by_frame.values():
            self.answer(frame, results)
        self.conn.maybe_done()

    # --- the core's Session port, for the connection -------------------------------------------

    def confirmed(self, ids: list[bytes]) -> None:
        done = []
        for (pid,) in _U64.iter_unpack(b"".join(ids)):
            w = self.waiting.pop(pid, None)
            if w is None:
                continue
            if w.offset < 0:  # confirmed without being placed: a bug, said as one
                done.append((w, result(w.info, ErrorCode.UNKNOWN, "no offset was given")))
            else:
                done.append((w, result(w.info, offset=w.offset)))
        self._answer_all(done)

    def placed(self, first_id: int, offset: int) -> None:
        w = self.waiting.get(first_id)
        if w is not None:
            w.offset = offset

    def rejected(self, ids: list[int], why: Refusal) -> None:
        code, message = REFUSALS[why]
        done = [(w, result(w.info, code, message)) for pid in ids
                if (w := self.waiting.pop(pid, None)) is not None]
        self._answer_all(done)

    def drop(self, stream: Stream, code: ErrorCode, message: str) -> None:
        """The stream is gone or moved: answer what waits on it, forget its publisher."""
        pub = self.publishers.pop(stream, None)
        if pub is not None:
            self.by_id.pop(pub.id, None)
            stream.detach_publisher(pub, confirm_first=False)
        done = [(w, result(w.info, code, message)) for pid, w in list(self.waiting.items())
                if w.stream is stream and self.waiting.pop(pid)]
        self._answer_all(done)

    def release(self) -> None:
        for pub in self.publishers.values():
            pub.stream.detach_publisher(pub, confirm_first=False)  # nobody to answer
        self.publishers.clear()
        self.by_id.clear()
        self.waiting.clear()
