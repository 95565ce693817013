"""The SBP listener's pure decisions, with tables: what a FETCH takes within batch_max_bytes,
when its min_bytes gate opens, a stream's range from what the broker knows, server addresses,
and the id lookup (collisions made ambiguous, never resolved to one of the names)."""

from __future__ import annotations

import pytest

from streamlet.broker.sbp.fetching import FILE, READ, STOP, gate_open, next_source, take
from streamlet.broker.sbp.places import Names, RangeFacts, Server, range_of, server_of
from streamlet.sbp import stream_id
from streamlet.storage import ChunkRef

RECORDS = [(0, b"a" * 10), (1, b"b" * 10), (3, b"c" * 10), (4, b"d" * 50)]


@pytest.mark.parametrize(("start", "max_bytes", "offsets"), [
    (0, 10, [0]), (0, 19, [0]), (0, 20, [0, 1]), (0, 1000, [0, 1, 3, 4]),
    (2, 20, [3]),  # a gap (tracking chunk, retention): from the next stored offset
    (4, 1, [4]),  # one record always, even past the limit
    (5, 100, []),
])
def test_take(start: int, max_bytes: int, offsets: list[int]) -> None:
    assert [o for o, _ in take(RECORDS, start, max_bytes)] == offsets


@pytest.mark.parametrize(("min_bytes", "available", "opens"), [
    (0, 0, True), (-1, 0, True), (1, 0, False), (10, 9, False), (10, 10, True), (10, 11, True),
])
def test_gate(min_bytes: int, available: int, opens: bool) -> None:
    assert gate_open(min_bytes, available) is opens


def _chunk(first: int, size: int, simple: bool = True) -> ChunkRef:
    return ChunkRef(first, 10, 0, 0, 0, 8, 48 + size, 0, size, 1, simple)


@pytest.mark.parametrize(("chunk", "start", "commit_end", "budget", "sent", "source"), [
    (_chunk(100, 500), 100, 200, 1000, 0, FILE),  # the whole chunk, from the file
    (_chunk(100, 500), 100, 200, 500, 0, FILE),  # exactly the budget
    (_chunk(100, 500, simple=False), 100, 200, 1000, 0, READ),  # may hold a sub-entry batch
    (_chunk(100, 500), 105, 200, 1000, 0, READ),  # from inside the chunk
    (_chunk(110, 500), 100, 200, 1000, 0, READ),  # a gap before it (retention, tracking)
    (_chunk(100, 5000), 100, 6000, 10_000, 0, READ),  # past a frame's room (file_max 4000)
    (_chunk(100, 500), 100, 200, 400, 0, READ),  # the first piece, past the budget: part of it
    (_chunk(100, 500), 100, 200, 400, 600, STOP),  # later: the answer ends at a chunk's end
    (_chunk(100, 500), 100, 200, 0, 1000, STOP),  # the budget spent
    (_chunk(100, 500), 100, 100, 1000, 0, STOP),  # not committed yet
    (None, 100, 100, 1000, 0, STOP),  # nothing stored from there
])
def test_next_source(chunk: ChunkRef | None, start: int, commit_end: int, budget: int, sent: int,
                     source: str) -> None:
    assert next_source(chunk, start, commit_end, budget, sent, 4000) == source


ME = Server(0, "h0:5555")
B1 = Server(1, "h1:5555")


@pytest.mark.parametrize(("facts", "want"), [
    (RangeFacts(7, 0, 10, False, ME), (0, 10, -1, [("h0:5555", True)])),
    (RangeFacts(7, 5, 10, True, B1), (5, 10, 10, [("h1:5555", True)])),  # sealed: end known
    (RangeFacts(7, None, None, False, B1, (ME,)), (-1, -1, -1, [("h1:5555", True),
                                                                ("h0:5555", False)])),
    (RangeFacts(7, 0, 3, False, None, (ME, B1)), (0, 3, -1, [("h0:5555", False),
                                                             ("h1:5555", False)])),  # electing
])
def test_range_of(facts: RangeFacts, want: tuple[int, int, int, list[tuple[str, bool]]]) -> None:
    r = range_of(facts)
    servers = [(s.server.advertiseAddr, s.isPrimary) for s in r.servers]
    assert (r.streamId, r.rangeIndex) == (7, 0)
    assert (r.startOffset, r.nextOffset, r.endOffset, servers) == want


@pytest.mark.parametrize(("address", "server"), [
    (("h1", 5552), Server(1, "h1:5555")),
    (("x", 5552), Server(-1, "x:5555")),  # not a peer: id unknown
])
def test_server_of(address: tuple[str, int], server: Server) -> None:
    assert server_of(address, (("h0", 5552), ("h1", 5552)), 5555) == server


def test_names() -> None:
    names = Names()
    assert names.name(stream_id("a"), lambda: ["a", "b"]) == "a"
    assert names.name(stream_id("c"), lambda: ["a", "b"]) is None
    assert names.name(stream_id("c"), lambda: ["a", "b", "c"]) == "c"  # rebuilt on a miss
    assert not names.ambiguous(stream_id("a"))


def test_a_collision_is_ambiguous(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlet.broker.sbp import places
    monkeypatch.setattr(places, "stream_id", lambda name: 1)  # every name collides
    names = Names()
    assert names.name(1, lambda: ["a", "b"]) is None and names.ambiguous(1)
    assert names.name(1, lambda: ["a"]) == "a" and not names.ambiguous(1)  # "b" went: no collision
