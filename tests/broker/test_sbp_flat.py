"""streamlet.sbp.flat, the hand-written FlatBuffers of APPEND's and FETCH's hot path, against
the generated code of the schema: what flat writes the generated readers read back exactly,
what the generated builder writes flat reads exactly, and bytes mutated anywhere are read or
refused as Malformed, never another exception."""

from __future__ import annotations

import random

import pytest

from streamlet.sbp import Malformed, read, write
from streamlet.sbp.fbs.AppendInfo import AppendInfoT
from streamlet.sbp.fbs.AppendRequest import AppendRequestT
from streamlet.sbp.fbs.AppendResponse import AppendResponseT
from streamlet.sbp.fbs.FetchResponse import FetchResponseT
from streamlet.sbp.flat import append_infos, append_response, fetch_response


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
    t = read(FetchResponseT, fetch_response([(0, 9, [(5, b"abc"), (6, memoryview(b""))]),
                                             (1, 8, [])]))
    assert [(r.requestIndex, r.streamId, r.batchLength, r.baseOffset, r.status.code)
            for r in t.fetchResponses] == [(0, 9, 3, 5, 0), (0, 9, 0, 6, 0), (1, 8, 0, -1, 0)]


def test_mutated_requests_are_read_or_refused_as_malformed() -> None:
    rng = random.Random(14)
    refused = 0
    for _ in range(3000):
        header, _ = _request(rng, rng.randrange(0, 6))
        data = bytearray(header)
        for _ in range(rng.randrange(1, 4)):
            if rng.random() < 0.2 and len(data) > 1:
                del data[rng.randrange(len(data)):]  # truncated
            elif data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            rows = append_infos(bytes(data))
        except Malformed:
            refused += 1
            continue
        assert all(len(r) == 3 and all(isinstance(v, int) for v in r) for r in rows)
    assert refused > 100  # the mutations do reach the checks
