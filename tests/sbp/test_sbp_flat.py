"""streamlet.sbp.flat, the hand-written FlatBuffers of APPEND's and FETCH's hot path, against
the generated code of the schema: what flat writes the generated readers read back exactly,
what the generated builder writes flat reads exactly, and bytes mutated anywhere are read or
refused as Malformed, never another exception."""

from __future__ import annotations

import random
import struct
import sys
from array import array
from collections.abc import Sequence

import pytest

from streamlet.sbp import Flags, Malformed, Opcode, SbpSplitter, decode, encode, flat, read, write
from streamlet.sbp.fbs.AppendInfo import AppendInfoT
from streamlet.sbp.fbs.AppendRequest import AppendRequestT
from streamlet.sbp.fbs.AppendResponse import AppendResponseT
from streamlet.sbp.fbs.AppendRun import AppendRunT
from streamlet.sbp.fbs.FetchResponse import FetchResponseT
from streamlet.sbp.flat import (
    PREFIXED,
    append_infos,
    append_response,
    append_run,
    append_run_frames,
    append_run_response,
    append_runs,
    fetch_prefixed_response,
    fetch_response,
    fetch_run_response,
    prefixed_lengths,
)

#: an AppendRequest's root vtable (timeout_ms at 4, the vector at 8) and AppendInfo's at 24 bytes:
#: soffset, request_index (4), stream_id (8), batch_length (16), padding
_REQUEST_VT = struct.pack("<HHHH", 8, 12, 4, 8)
_INFO_VT = struct.pack("<HHHHH2x", 10, 24, 8, 4, 16)


def even_request(timeout_ms: int, ids: Sequence[int], indexes: Sequence[int],
                 lengths: Sequence[int]) -> bytes:
    """An AppendRequest as another encoder may lay it out: evenly spaced AppendInfo tables of
    one vtable (the generated builder pads them unevenly), which flat's Python reader reads a
    column at a time through strided views. Layout: the root offset, the two vtables (at 4 and
    12), the root table (24), the vector (36), the tables (8-aligned)."""
    n = len(ids)
    first = (40 + 4 * n + 7) & ~7
    buf = bytearray(first + 24 * n)
    struct.pack_into("<I8s12siiII", buf, 0, 24, _REQUEST_VT, _INFO_VT, 24 - 4, timeout_ms, 4, n)
    if not n:
        return bytes(buf)
    # element i at 40 + 4i points to the table at first + 24i
    struct.pack_into(f"<{n}I", buf, 40, *range(first - 40, first - 40 + 20 * n, 20))
    if sys.byteorder != "little":
        for i, (sid, idx, length) in enumerate(zip(ids, indexes, lengths, strict=True)):
            at = first + 24 * i
            struct.pack_into("<iiqi4x", buf, at, at - 12, idx, sid, length)
        return bytes(buf)
    region = memoryview(buf)[first:]
    ints, longs = region.cast("i"), region.cast("q")
    ints[0::6] = array("i", range(first - 12, first - 12 + 24 * n, 24))  # the vtable at 12
    ints[1::6] = array("i", indexes)
    longs[1::3] = array("q", ids)
    ints[4::6] = array("i", lengths)
    return bytes(buf)


def mutated(rng: random.Random, data: bytes) -> bytes:
    """``data`` with one to three changes: a byte replaced, or the end cut off."""
    out = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        if rng.random() < 0.2 and len(out) > 1:
            del out[rng.randrange(len(out)):]
        elif out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def _python_columns(buf: bytes) -> list[list[int]]:
    """AppendInfo's columns read by the Python reader (the C one aside)."""
    return flat._APPEND_INFO.columns(buf, flat.table_vector(buf, flat.root(buf), 1))


def _request(rng: random.Random, n: int) -> tuple[bytes, list[tuple[int, int, int]]]:
    infos, want = [], []
    for i in range(n):
        info = AppendInfoT()
        # zeros too: the builder leaves default fields out, so the tables' vtables differ
        info.streamId = rng.choice((0, 1, rng.randrange(1 << 63)))
        info.requestIndex = rng.choice((0, i, rng.randrange(-(1 << 31), 1 << 31)))
        info.batchLength = rng.choice((0, 100, rng.randrange(1 << 31)))
        infos.append(info)
        want.append((info.streamId, info.requestIndex, info.batchLength))
    req = AppendRequestT()
    req.timeoutMs, req.appendRequests = rng.randrange(10_000), infos
    return write(req), want


@pytest.mark.parametrize("n", [0, 1, 2, 3, 100, 1000])
def test_append_infos_read_what_the_generated_builder_writes(n: int) -> None:
    rng = random.Random(n)
    header, want = _request(rng, n)
    assert append_infos(header) == want
    assert append_infos(b"") == []  # an empty header: every field at its default, no batches


@pytest.mark.parametrize("n", [0, 1, 2, 3, 100, 1000])
def test_append_request_reads_back_by_both_readers(n: int) -> None:
    """flat's AppendRequest: the generated reader reads it; ``append_columns`` reads it through
    strided views (evenly spaced tables, one vtable), agreeing with the table-at-a-time path."""
    want = [((1 << 40) + i % 2, i - 5, 100 + i % 3) for i in range(n)]
    ids, indexes, lengths = (list(c) for c in zip(*want, strict=True)) if n else ([], [], [])
    header = even_request(777, ids, indexes, lengths)
    t = read(AppendRequestT, header)
    assert t.timeoutMs == 777
    assert [(i.streamId, i.requestIndex, i.batchLength)
            for i in t.appendRequests or []] == want
    tables = flat.table_vector(header, flat.root(header), 1)
    if n > 1:
        assert flat._APPEND_INFO._uniform(header, tables) is not None  # the strided path
    assert flat._APPEND_INFO.rows(header, tables) == want
    assert list(zip(*_python_columns(header), strict=True)) == want
    assert append_infos(header) == want


def test_c_and_python_write_the_same_results() -> None:
    """The results written in C (``_flat``) and in Python (``_fill_*``) are the same bytes."""
    if flat.fill_append is flat._fill_append:
        pytest.skip("the C accelerator was not built (no compiler at install time)")
    rng = random.Random(15)
    for _ in range(200):
        runs = [([rng.randrange(-(1 << 31), 1 << 31) for _ in range(rng.randrange(4))],
                 rng.randrange(-(1 << 63), 1 << 63), rng.randrange(1 << 62), rng.randrange(1 << 41))
                for _ in range(rng.randrange(4))]
        n = sum(len(r[0]) for r in runs)
        c, py = (flat._frame(flat._APPEND_VT, 40, n)[0] for _ in range(2))
        _, at, status = flat._frame(flat._APPEND_VT, 40, n)
        flat.fill_append(c, at, status, runs)
        flat._fill_append(py, at, status, runs)
        assert c == py
        streams: list[tuple[int, int, list[tuple[int, int]], bytes | array[int]]] = []
        for i in range(rng.randrange(4)):
            counts = [rng.randrange(3) for _ in range(rng.randrange(3))]
            firsts = [rng.randrange(1 << 50) for _ in counts]
            lengths = array("i", [rng.randrange(1 << 20) for _ in range(sum(counts))])
            streams.append((i, rng.randrange(-(1 << 63), 1 << 63),
                            list(zip(firsts, counts, strict=True)), lengths))
        n = sum(len(s[3]) or 1 for s in streams)
        c, py = (flat._frame(flat._FETCH_VT, 32, n)[0] for _ in range(2))
        _, at, status = flat._frame(flat._FETCH_VT, 32, n)
        flat.fill_fetch(c, at, status, streams)
        flat._fill_fetch(py, at, status, streams)
        assert c == py
    with pytest.raises(ValueError):  # runs holding more records than lengths: refused, no write
        flat.fill_fetch(bytearray(1000), 64, 900, [(0, 1, [(0, 3)], array("i", [1, 2]))])
    with pytest.raises(ValueError):  # past the buffer
        flat.fill_append(bytearray(100), 64, 90, [([1, 2], 1, 0, 0)])


def test_append_response_reads_back_with_the_generated_reader() -> None:
    runs = [([3, 4, 5], 1 << 62, 10, 1_700_000_000_000), ([0], 7, 1 << 40, 5), ([], 1, 0, 0)]
    t = read(AppendResponseT, append_response(runs))
    assert t.throttleTimeMs == 0 and t.status.code == 0
    assert [(r.requestIndex, r.streamId, r.baseOffset, r.streamAppendTimeMs, r.status.code,
             r.status.message) for r in t.appendResponses] == [
        (3, 1 << 62, 10, 1_700_000_000_000, 0, None), (4, 1 << 62, 11, 1_700_000_000_000, 0, None),
        (5, 1 << 62, 12, 1_700_000_000_000, 0, None), (0, 7, 1 << 40, 5, 0, None)]
    assert read(AppendResponseT, append_response([])).appendResponses == []


def test_fetch_response_reads_back_with_the_generated_reader() -> None:
    t = read(FetchResponseT, fetch_response([(0, 9, [(5, 2)], array("i", [3, 0])),
                                             (1, 8, [], array("i"))]))
    assert [(r.requestIndex, r.streamId, r.batchLength, r.baseOffset, r.status.code)
            for r in t.fetchResponses] == [(0, 9, 3, 5, 0), (0, 9, 0, 6, 0), (1, 8, 0, -1, 0)]


def test_fetch_run_response_reads_back_with_the_generated_reader() -> None:
    """A result per run: its first offset, its bytes, its batches' lengths; none for a stream
    without records but the empty result; runs that do not hold the lengths are refused."""
    t = read(FetchResponseT, fetch_run_response([
        (0, 9, [(5, 2), (9, 3)], array("i", [3, 0, 1 << 20, 2, 7]), 3 + (1 << 20) + 9),
        (1, 8, [], array("i"), 0), (2, 7, [(1 << 62, 1)], array("i", [4]), 4)]))
    got = [(r.requestIndex, r.streamId, r.baseOffset, r.batchLength, list(r.batchLengths),
            r.status.code) for r in t.fetchResponses]
    assert got == [(0, 9, 5, 3, [3, 0], 0), (0, 9, 9, (1 << 20) + 9, [1 << 20, 2, 7], 0),
                   (1, 8, -1, 0, [], 0), (2, 7, 1 << 62, 4, [4], 0)]
    with pytest.raises(ValueError):
        fetch_run_response([(0, 9, [(5, 1)], array("i", [3, 4]), 7)])


def test_fetch_prefixed_response_reads_back_with_the_generated_reader() -> None:
    """A result per run: its first offset, its payload bytes, its batch count, no lengths (its
    vtable after the results: negative soffsets, which the generated reader follows); none for
    a stream without records but the empty result; a size per run or a ValueError."""
    t = read(FetchResponseT, fetch_prefixed_response([
        (0, 9, [(5, 2), (9, 3)], [11, (1 << 20) + 21]), (1, 8, [], []),
        (2, 7, [(1 << 62, 1)], [8])]))
    got = [(r.requestIndex, r.streamId, r.baseOffset, r.batchLength, r.batchCount,
            r.batchLengths, r.status.code) for r in t.fetchResponses]
    assert got == [(0, 9, 5, 11, 2, None, 0), (0, 9, 9, (1 << 20) + 21, 3, None, 0),
                   (1, 8, -1, 0, 0, None, 0), (2, 7, 1 << 62, 8, 1, None, 0)]
    with pytest.raises(ValueError):
        fetch_prefixed_response([(0, 9, [(5, 1)], [3, 4])])


def _runs_request(rng: random.Random) -> tuple[bytes, list[tuple[int, int, list[int], int]]]:
    want = [(rng.randrange(-1 << 63, 1 << 63), rng.randrange(-1 << 31, 1 << 31),
             [rng.randrange(-1 << 31, 1 << 31) for _ in range(rng.randrange(0, 5))],
             rng.choice((0, 0, 3, rng.randrange(-1 << 31, 1 << 31))))
            for _ in range(rng.randrange(1, 4))]
    req = AppendRequestT()
    req.timeoutMs, req.appendRuns, req.lengthPrefixed = 1, [], rng.random() < 0.5
    for sid, idx, lengths, count in want:
        run = AppendRunT()
        run.streamId, run.requestIndex, run.batchLengths, run.batchCount = \
            sid, idx, lengths, count
        req.appendRuns.append(run)
    return write(req), want


def test_append_runs_read_what_the_generated_builder_writes() -> None:
    """AppendRuns (streamlet's) as the generated code writes them; None for the document's
    form; mutated, they are read or refused as Malformed, never another error."""
    rng = random.Random(15)
    for _ in range(200):
        header, want = _runs_request(rng)
        assert append_runs(header) == append_runs(header, python=True) == want
    for python in (False, True):
        assert append_runs(b"", python) is None
        assert append_runs(_request(rng, 3)[0], python) is None
    refused = 0
    for _ in range(5000):
        data = mutated(rng, _runs_request(rng)[0])
        got: list[object] = []
        for python in (False, True):  # C and Python: the same runs, or both refuse
            try:
                got.append(append_runs(data, python))
            except Malformed:
                got.append("refused")
        assert got[0] == got[1], data.hex()
        refused += got[0] == "refused"
    assert refused > 100


def _usual_frame(rng: random.Random
                 ) -> tuple[bytes, tuple[int, int, int, list[int], bool] | None]:
    """An APPEND frame of one AppendRun whose lengths add up to its payload (the usual one),
    given in batch_lengths or (length_prefixed) in the payload, or now and then one that is not:
    several runs, none, no batch, lengths both ways or neither, a response, another opcode."""
    sid, idx = rng.randrange(-1 << 63, 1 << 63), rng.randrange(-1 << 31, 1 << 31)
    lengths = [rng.choice((0, 1, 100, rng.randrange(300))) for _ in range(rng.randrange(1, 6))]
    bodies = [rng.randbytes(n) for n in lengths]
    prefixed = rng.random() < 0.5
    run = AppendRunT()
    run.streamId, run.requestIndex = sid, idx
    if prefixed:
        run.batchCount = len(lengths)
        payload = b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    else:
        run.batchLengths, payload = lengths, b"".join(bodies)
    req = AppendRequestT()
    req.timeoutMs, req.appendRuns, req.lengthPrefixed = 1, [run], prefixed
    opcode, flags, usual = Opcode.APPEND, 0, True
    match rng.randrange(10):
        case 0:
            req.appendRuns, usual = [run, run], False
        case 1:
            run.batchLengths, run.batchCount, usual = [], 0, False
        case 2:
            flags, usual = int(Flags.RESPONSE), False
        case 3:
            opcode, usual = Opcode.FETCH, False
        case 4:  # batch_count without length_prefixed, or batch_lengths with it
            run.batchLengths, run.batchCount, usual = lengths, len(lengths), False
        case 5 if prefixed:  # one batch more than the payload holds
            run.batchCount, usual = len(lengths) + 1, False
    frame_sid = rng.randrange(1 << 32)
    raw = encode(opcode, flags, frame_sid, write(req), payload)
    return raw, (frame_sid, sid, idx, lengths, prefixed) if usual else None


def test_append_run_reads_the_usual_frame_in_c_and_python() -> None:
    """append_run: the usual APPEND frame's run and where its lengths and payload are, None for
    any other frame; C and Python alike on frames and on mutations of them, which are never an
    error (the general path answers what is wrong)."""
    rng = random.Random(16)
    for _ in range(300):
        raw, want = _usual_frame(rng)
        got = append_run(raw)
        assert got == append_run(raw, python=True)
        if want is None:
            assert got is None
            continue
        assert got is not None
        frame_sid, sid, idx, count, lengths_at, payload_at = got
        assert (frame_sid, sid, idx, count) == (*want[:3], len(want[3]))
        if want[4]:  # each batch behind its length in the payload
            assert lengths_at == PREFIXED
            assert prefixed_lengths(raw[payload_at:], count) == (want[3], len(raw) - payload_at)
        else:
            assert list(struct.unpack_from(f"<{count}i", raw, lengths_at)) == want[3]
            assert len(raw) - payload_at == sum(want[3])
    hits = 0
    for _ in range(20000):
        data = mutated(rng, _usual_frame(rng)[0])
        got = append_run(data)
        assert got == append_run(data, python=True), data.hex()
        hits += got is not None
    assert 1000 < hits < 19000  # some mutations stay usual (a payload byte), most do not


def test_append_run_frames_read_back_as_frames() -> None:
    """Each answer is a whole frame: its flags and stream identifier, and one AppendRun result
    the generated reader reads."""
    answers = [(7, False, 3, 100, 9, 1 << 40, 55), (8, True, 0, 1, -2, 0, 56)]
    data = append_run_frames(answers)
    frames = list(SbpSplitter(0).feed(data))
    assert len(frames) == 2
    for raw, (sid, end, idx, count, stream, offset, ms) in zip(frames, answers, strict=True):
        f = decode(raw)
        assert f is not None and (f.opcode, f.stream_id, f.is_response, f.is_end) == (
            Opcode.APPEND, sid, True, end)
        [r] = read(AppendResponseT, f.header).appendResponses
        assert (r.requestIndex, r.batchCount, r.streamId, r.baseOffset, r.streamAppendTimeMs,
                r.status.code) == (idx, count, stream, offset, ms, 0)
    assert append_run_frames([]) == b""


def test_append_run_response_reads_back_with_the_generated_reader() -> None:
    """A range of request indexes is one result with its batch_count; a list, one each."""
    t = read(AppendResponseT, append_run_response([(range(3, 7), 9, 100, 5),
                                                   ([1, 2], 8, 50, 6)]))
    assert [(r.requestIndex, r.batchCount, r.streamId, r.baseOffset, r.streamAppendTimeMs,
             r.status.code) for r in t.appendResponses] == [
        (3, 4, 9, 100, 5, 0), (1, 1, 8, 50, 6, 0), (2, 1, 8, 51, 6, 0)]
    assert read(AppendResponseT, append_run_response([])).appendResponses == []
    one = read(AppendResponseT, append_run_response([(range(7, 107), 9, 1 << 40, 55)]))
    assert [(r.requestIndex, r.batchCount, r.baseOffset, r.streamAppendTimeMs)
            for r in one.appendResponses] == [(7, 100, 1 << 40, 55)]  # its own layout


def test_mutated_requests_are_read_or_refused_as_malformed() -> None:
    rng = random.Random(14)
    refused = 0
    for _ in range(10000):
        header, want = _request(rng, rng.randrange(0, 6))
        if rng.random() < 0.5:  # flat's own layout: the strided path's checks
            header = even_request(1, *(list(c) for c in zip(*want, strict=True))) \
                if want else even_request(1, [], [], [])
        data = mutated(rng, header)
        try:
            rows = append_infos(data)
        except Malformed:
            refused += 1
            if flat._read_columns is not None and data:  # the Python reader refuses it too
                with pytest.raises(Malformed):
                    _python_columns(data)
            continue
        assert all(len(r) == 3 and all(isinstance(v, int) for v in r) for r in rows)
        if flat._read_columns is not None and data:  # C and Python read alike
            assert list(zip(*_python_columns(data), strict=True)) == rows
    assert refused > 100  # the mutations do reach the checks


def test_answers_read_alike_in_c_and_python() -> None:
    """The answers' results (another spec: other slots and widths) read by ``Scalars.read`` in C
    and by the Python reader, from what flat writes and from mutations of it."""
    if flat._read_columns is None:
        pytest.skip("the C accelerator was not built (no compiler at install time)")
    fetched = flat.Scalars((2, "i", 0), (4, "q", -1), (1, "i", 7))
    rng = random.Random(16)
    answers = [fetch_response([(0, 9, [(5, 3)], array("i", [3, 0, 1 << 20])), (1, 8, [], array("i"))]),
               append_response([([3, 4], 1 << 62, 10, 17)])]
    read_alike = 0
    for _ in range(5000):
        data = bytearray(rng.choice(answers))
        for _ in range(rng.randrange(0, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        buf = bytes(data)
        try:
            want = fetched.columns(buf, flat.table_vector(buf, flat.root(buf), 2))
        except Malformed:
            with pytest.raises(Malformed):
                fetched.read(buf, 2)
            continue
        assert fetched.read(buf, 2) == want
        read_alike += 1
    assert read_alike > 1000
    assert fetched.read(answers[0], 2) == [[3, 0, 1 << 20, 0], [5, 6, 7, -1], [0, 0, 0, 1]]


def test_summaries_match_the_columns_in_c_and_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Scalars.summary`` (count, and first, last, sum, consecutive per field) agrees with the
    columns it sums up, from what flat writes and from mutations of it, with the C reader and
    without it."""
    fetched = flat.Scalars((2, "i", 0), (4, "q", -1))
    rng = random.Random(17)
    answers = [fetch_response([(0, 9, [(5, 3), (9, 1)], array("i", [3, 0, 1 << 20, 2]))]),
               fetch_response([(0, 9, [(1 << 62, 4)], array("i", [1, 2, 3, 4]))]),
               fetch_response([(1, 8, [], array("i"))])]
    checked = 0
    for _ in range(3000):
        data = bytearray(rng.choice(answers))
        for _ in range(rng.randrange(0, 2)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        buf = bytes(data)
        try:
            cols = fetched.read(buf, 2)
        except Malformed:
            with pytest.raises(Malformed):
                fetched.summary(buf, 2)
            continue
        want = (len(cols[0]), [(c[0], c[-1], flat._wrap64(sum(c)),
                                all(b == a + 1 for a, b in zip(c, c[1:], strict=False)))
                               if c else (0, 0, 0, True) for c in cols])
        assert fetched.summary(buf, 2) == want
        with monkeypatch.context() as m:
            m.setattr(flat, "_read_columns", None)
            assert fetched.summary(buf, 2) == want
        checked += 1
    assert checked > 500
    assert fetched.summary(answers[0], 2) == (4, [(3, 2, 3 + (1 << 20) + 2, False),
                                                  (5, 9, 5 + 6 + 7 + 9, False)])
    # a sum wraps as a signed 64-bit one (4 x 2^62 is 2^64)
    assert fetched.summary(answers[1], 2)[1][1] == ((1 << 62), (1 << 62) + 3, 6, True)
