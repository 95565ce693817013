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
from tests.storage.test_log import records
from tests.support.fakes import ManualClock

SID = 42  # the stream's SBP id, as the fake connection knows it


class FakeConn:
    """What Appends asks of its SbpConnection, and the core's PublisherSession routed to it."""

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

    # the core's PublisherSession
    def placed(self, pid: int, first_id: int, offset: int) -> None:
        self.appends.placed(first_id, offset)

    def confirmed(self, pid: int, ids: list[bytes]) -> None:
        self.appends.confirmed(ids)

    def rejected(self, pid: int, ids: list[int], why: Refusal) -> None:
        self.appends.rejected(ids, why)


def _infos(stream_ids: list[int], payload: bytes) -> tuple[bytes, memoryview]:
    """The document's form: a table per batch of 2 bytes."""
    infos = []
    for i, sid in enumerate(stream_ids):
        info = AppendInfoT()
        info.streamId, info.requestIndex, info.batchLength = sid, i, 2
        infos.append(info)
    req = AppendRequestT()
    req.appendRequests = infos
    return write(req), memoryview(payload)


def _runs(stream_ids: list[int], payload: bytes, prefixed: bool = False
          ) -> tuple[bytes, memoryview]:
    """streamlet's AppendRuns: consecutive batches (of 2 bytes) to one stream as one run, their
    lengths in batch_lengths or, ``prefixed``, in the payload."""
    req = AppendRequestT()
    req.appendRuns, req.lengthPrefixed = [], prefixed
    for i, sid in enumerate(stream_ids):
        if not (i and stream_ids[i - 1] == sid):
            run = AppendRunT()
            run.streamId, run.requestIndex = sid, i
            run.batchLengths = None if prefixed else []  # absent: a vector even empty is there
            req.appendRuns.append(run)
        if prefixed:
            req.appendRuns[-1].batchCount += 1
        else:
            req.appendRuns[-1].batchLengths.append(2)
    if prefixed:
        payload = b"".join(b"\0\0\0\2" + payload[k : k + 2] for k in range(0, len(payload), 2))
    return write(req), memoryview(payload)


def _prefixed(stream_ids: list[int], payload: bytes) -> tuple[bytes, memoryview]:
    return _runs(stream_ids, payload, prefixed=True)


Form = Callable[[list[int], bytes], tuple[bytes, memoryview]]
FORMS = pytest.mark.parametrize("_request", [_infos, _runs, _prefixed],
                                ids=["infos", "runs", "prefixed"])


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[tuple[Stream, ManualClock]]:
    clock = ManualClock()
    stream = Stream("s", tmp_path / "s", StreamSettings(), "never", clock)
    stream.awaits_commit = True
    yield stream, clock
    stream.close()


@FORMS
def test_a_run_is_answered_part_by_part_then_the_rest_not_primary(
        replicated: tuple[Stream, ManualClock], _request: Form) -> None:
    stream, clock = replicated
    conn = FakeConn(stream)
    conn.appends.start(7, *_request([SID, 99, SID, SID], b"aabbccdd"))
    assert conn.answers == [([(1, -1, ErrorCode.STREAM_NOT_FOUND)], False)]  # refused at once
    clock.advance(1)  # written as one chunk: offsets 0..2, waiting for the commit
    assert stream.log.next_offset == 3 and len(conn.answers) == 1
    # the second publish of the frame: a run of its own, placed after the first
    conn.appends.start(8, *_request([SID], b"ee"))
    clock.advance(1)
    stream.commit(3)  # the first chunk is on a majority
    assert conn.answers[1] == ([(0, 0, 0), (2, 1, 0), (3, 2, 0)], True)
    assert len(conn.answers) == 2 and list(conn.appends.waiting) == [4]
    conn.appends.drop(stream, ErrorCode.NOT_PRIMARY, "moved")  # fenced before its commit
    assert conn.answers[2] == ([(0, -1, ErrorCode.NOT_PRIMARY)], True)
    assert not conn.appends.waiting and not conn.appends.starts and not conn.appends.offsets


@FORMS
def test_a_sealed_stream_refuses_every_batch_of_the_run(
        replicated: tuple[Stream, ManualClock], _request: Form) -> None:
    stream, _ = replicated
    conn = FakeConn(stream)
    stream.sealed = True
    conn.appends.start(3, *_request([SID, SID], b"aabb"))
    assert conn.answers == [([(0, -1, ErrorCode.NOT_PRIMARY), (1, -1, ErrorCode.NOT_PRIMARY)],
                             True)]
    assert not conn.appends.waiting


@pytest.mark.parametrize("prefixed", [False, True], ids=["lengths", "prefixed"])
def test_the_usual_frame_is_answered_as_its_run_is_committed(
        replicated: tuple[Stream, ManualClock], prefixed: bool) -> None:
    """One run to one stream (start_run, the hot path): answered once committed, as one
    result; to a stream not here, every batch refused at once."""
    stream, clock = replicated
    conn = FakeConn(stream)
    for sid, to, payload in ((5, SID, b"aabbcc"), (6, 99, b"aabb")):
        header, body = _runs([to] * (len(payload) // 2), payload, prefixed)
        raw = encode(Opcode.APPEND, 0, sid, header, body)
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


def test_the_stored_messages_are_the_batches_in_every_form(
        replicated: tuple[Stream, ManualClock]) -> None:
    """Whatever the form, each batch is stored as one simple entry of its bytes."""
    stream, clock = replicated
    conn = FakeConn(stream)
    for k, form in enumerate((_infos, _runs, _prefixed)):
        conn.appends.start(k, *form([SID, SID], b"ab%d" % k + b"c"))
    clock.advance(1)
    stream.commit(stream.log.next_offset)
    assert sorted(ok for ok, _ in conn.answers) == [[(0, 0, 0), (1, 1, 0)], [(0, 2, 0), (1, 3, 0)],
                                                   [(0, 4, 0), (1, 5, 0)]]  # frames in any order
    assert [body for _, body in records(stream.log)] == [b"ab", b"0c", b"ab", b"1c", b"ab",
                                                     b"2c"]


def _bad(prefixed: bool = False, count: int = 0, lengths: list[int] | None = None,
         payload: bytes = b"", infos: bool = False) -> tuple[bytes, bytes]:
    """An AppendRequest of one run to SID (or, ``infos``, of one AppendInfo) and its payload."""
    run = AppendRunT()
    run.streamId, run.batchLengths, run.batchCount = SID, lengths, count
    req = AppendRequestT()
    req.lengthPrefixed, req.appendRuns = prefixed, [run]
    if infos:
        req.appendRuns, req.appendRequests = None, [AppendInfoT()]
    return write(req), payload


@pytest.mark.parametrize("request_, why", [
    (_bad(prefixed=True, count=2, payload=b"\0\0\0\2ab"), "cut short"),
    (_bad(prefixed=True, count=1, payload=b"\0\0\0\3ab"), "a batch of 3 bytes"),
    (_bad(prefixed=True, count=1, payload=b"\x80\0\0\0"), "a batch of 2147483648 bytes"),
    (_bad(prefixed=True, count=1, payload=b"\0\0\0\1ab"), "do not add up"),
    (_bad(prefixed=True, count=-1), "an AppendRun of -1 batches"),
    (_bad(prefixed=True, count=1, lengths=[2], payload=b"\0\0\0\2ab"), "not batch_lengths"),
    (_bad(count=1, payload=b"ab"), "only with length_prefixed"),
    (_bad(prefixed=True, infos=True), "for append_runs"),
    (_bad(lengths=[1, -1], payload=b""), "do not add up"),
])
def test_an_append_that_does_not_fill_its_payload_is_refused(
        replicated: tuple[Stream, ManualClock], request_: tuple[bytes, bytes], why: str) -> None:
    """The general path: INVALID_REQUEST saying why, nothing stored."""
    stream, clock = replicated
    errors: list[tuple[object, ...]] = []
    conn = FakeConn(stream)
    conn.system_error = lambda *args: errors.append(args)  # type: ignore[method-assign]
    conn.appends.start(4, request_[0], memoryview(request_[1]))
    clock.advance(1)
    assert len(errors) == 1 and errors[0][:3] == (Opcode.APPEND, 4, ErrorCode.INVALID_REQUEST)
    assert why in str(errors[0][3]), errors
    assert stream.log.next_offset == 0 and not conn.answers
