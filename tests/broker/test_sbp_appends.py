"""APPEND's bookkeeping (broker/sbp/appending.py) on a real core Stream in memory, manual clock,
replicated (a confirm waits for the commit): a run of batches answered part by part as the
commit moves, the rest answered NOT_PRIMARY when the stream moves away, and a sealed stream's
refusal; every request index answered once, the last answer with the end flag. In the
document's form (a table per batch) and streamlet's (AppendRuns, a result per run)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamlet.broker.sbp.appending import Appends
from streamlet.core.ports import Refusal
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Stream
from streamlet.sbp import ErrorCode, Opcode, SbpSplitter, decode, encode, read, write
from streamlet.sbp.fbs.AppendInfo import AppendInfoT
from streamlet.sbp.fbs.AppendRequest import AppendRequestT
from streamlet.sbp.fbs.AppendResponse import AppendResponseT
from streamlet.sbp.fbs.AppendRun import AppendRunT
from streamlet.sbp.flat import append_run
from tests.core.clock import ManualClock

SID = 42  # the stream's SBP id, as the fake connection knows it


class FakeConn:
    """What Appends asks of its SbpConnection, and the core's Session port routed to it."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.appends = Appends(self)  # type: ignore[arg-type]
        self.answers: list[tuple[list[tuple[int, int, int]], bool]] = []  # (index, offset, code)

    def writable_stream(self, sid: int) -> Stream | tuple[int, str]:
        return self.stream if sid == SID else (ErrorCode.STREAM_NOT_FOUND, "none")

    def answer(self, opcode: int, sid: int, table: Any, payload: Any = None,
               end: bool = True) -> None:
        self.answer_raw(opcode, sid, write(table), payload, end)

    def answer_raw(self, opcode: int, sid: int, header: bytes, payload: Any = None,
                   end: bool = True) -> None:
        t = read(AppendResponseT, header)
        self.answers.append(([(r.requestIndex + k, r.baseOffset + k if r.baseOffset >= 0 else -1,
                               r.status.code if r.status else 0)
                              for r in t.appendResponses or []
                              for k in range(r.batchCount)], end))  # an AppendRun's, expanded

    def answers_raw(self, opcode: int, answers: list[tuple[int, bytes, bool]]) -> None:
        for sid, header, end in answers:
            self.answer_raw(opcode, sid, header, None, end)

    def write(self, data: bytes) -> None:
        """Whole answer frames (append_run_frames: the usual frame's answers)."""
        for raw in SbpSplitter(0).feed(data):
            f = decode(raw)
            assert f is not None and f.opcode == Opcode.APPEND and f.is_response
            self.answer_raw(f.opcode, f.stream_id, bytes(f.header), None, f.is_end)

    def system_error(self, *args: Any) -> None:
        raise AssertionError(args)

    def maybe_done(self) -> None:
        pass

    # the core's Session port
    def placed(self, pid: int, first_id: int, offset: int) -> None:
        self.appends.placed(first_id, offset)

    def confirmed(self, pid: int, ids: list[bytes]) -> None:
        self.appends.confirmed(ids)

    def rejected(self, pid: int, ids: list[int], why: Refusal) -> None:
        self.appends.rejected(ids, why)


def _infos(stream_ids: list[int]) -> bytes:
    """The document's form: a table per batch of 2 bytes."""
    infos = []
    for i, sid in enumerate(stream_ids):
        info = AppendInfoT()
        info.streamId, info.requestIndex, info.batchLength = sid, i, 2
        infos.append(info)
    req = AppendRequestT()
    req.appendRequests = infos
    return write(req)


def _runs(stream_ids: list[int]) -> bytes:
    """streamlet's AppendRuns: consecutive batches to one stream as one run."""
    req = AppendRequestT()
    req.appendRuns = []
    for i, sid in enumerate(stream_ids):
        if i and stream_ids[i - 1] == sid:
            req.appendRuns[-1].batchLengths.append(2)
            continue
        run = AppendRunT()
        run.streamId, run.requestIndex, run.batchLengths = sid, i, [2]
        req.appendRuns.append(run)
    return write(req)


FORMS = pytest.mark.parametrize("_request", [_infos, _runs], ids=["infos", "runs"])


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[tuple[Stream, ManualClock]]:
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    stream.awaits_commit = True
    yield stream, clock
    stream.close()


@FORMS
def test_a_run_is_answered_part_by_part_then_the_rest_not_primary(
        replicated: tuple[Stream, ManualClock], _request: Callable[[list[int]], bytes]) -> None:
    stream, clock = replicated
    conn = FakeConn(stream)
    conn.appends.start(7, _request([SID, 99, SID, SID]), memoryview(b"aabbccdd"))
    assert conn.answers == [([(1, -1, ErrorCode.STREAM_NOT_FOUND)], False)]  # refused at once
    clock.advance(1)  # written as one chunk: offsets 0..2, waiting for the commit
    assert stream.log.next_offset == 3 and len(conn.answers) == 1
    # the second publish of the frame: a run of its own, placed after the first
    conn.appends.start(8, _request([SID]), memoryview(b"ee"))
    clock.advance(1)
    stream.commit(3)  # the first chunk is on a majority
    assert conn.answers[1] == ([(0, 0, 0), (2, 1, 0), (3, 2, 0)], True)
    assert len(conn.answers) == 2 and list(conn.appends.waiting) == [4]
    conn.appends.drop(stream, ErrorCode.NOT_PRIMARY, "moved")  # fenced before its commit
    assert conn.answers[2] == ([(0, -1, ErrorCode.NOT_PRIMARY)], True)
    assert not conn.appends.waiting and not conn.appends.starts and not conn.appends.offsets


@FORMS
def test_a_sealed_stream_refuses_every_batch_of_the_run(
        replicated: tuple[Stream, ManualClock], _request: Callable[[list[int]], bytes]) -> None:
    stream, _ = replicated
    conn = FakeConn(stream)
    stream.sealed = True
    conn.appends.start(3, _request([SID, SID]), memoryview(b"aabb"))
    assert conn.answers == [([(0, -1, ErrorCode.NOT_PRIMARY), (1, -1, ErrorCode.NOT_PRIMARY)],
                             True)]
    assert not conn.appends.waiting


def test_the_usual_frame_is_answered_as_its_run_is_committed(
        replicated: tuple[Stream, ManualClock]) -> None:
    """One run to one stream (start_run, the hot path): answered once committed, as one
    result; to a stream not here, every batch refused at once."""
    stream, clock = replicated
    conn = FakeConn(stream)
    for sid, to, payload in ((5, SID, b"aabbcc"), (6, 99, b"aabb")):
        raw = encode(Opcode.APPEND, 0, sid, _runs([to] * (len(payload) // 2)), payload)
        run = append_run(raw)
        assert run is not None
        conn.appends.start_run(memoryview(raw), run)
    assert conn.answers == [([(0, -1, ErrorCode.STREAM_NOT_FOUND),
                              (1, -1, ErrorCode.STREAM_NOT_FOUND)], True)]
    clock.advance(1)
    assert stream.log.next_offset == 3 and len(conn.answers) == 1  # written, not committed
    stream.commit(3)
    assert conn.answers[1] == ([(0, 0, 0), (1, 1, 0), (2, 2, 0)], True)
    assert not conn.appends.waiting and not conn.appends.offsets
