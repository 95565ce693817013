"""The add-member workload's pure parts: reading each server's status, the row, the target."""

from __future__ import annotations

from bench.addmember import add_member_row
from bench.report import add_member_targets, ratio
from bench.run import _rank
from bench.servers import rabbit_in_sync, rabbit_last, streamlet_in_sync
from bench.workloads import Row

# ``rabbitmq-streams stream_status --formatter json`` of RabbitMQ 3.10.8 as seen here: offset
# is the last offset a member holds, committed_offset the committed chunk's first offset
_STATUS = [{"role": "replica", "node": "a@localhost", "offset": 99_999,
            "committed_offset": 99_696, "first_offset": 0, "readers": 0, "segments": 1},
           {"role": "writer", "node": "b@localhost", "offset": 99_999,
            "committed_offset": 99_696, "first_offset": 0, "readers": 1, "segments": 1},
           {"role": "replica", "node": "c@localhost", "offset": 99_695,
            "committed_offset": 99_696, "first_offset": 0, "readers": 0, "segments": 1}]


def test_rabbit_status() -> None:
    assert rabbit_last(_STATUS) == 99_999
    assert rabbit_last([r for r in _STATUS if r["role"] != "writer"]) == -1
    assert rabbit_in_sync(_STATUS, "a@localhost", 99_999)
    assert not rabbit_in_sync(_STATUS, "c@localhost", 99_999)  # one chunk short
    assert not rabbit_in_sync(_STATUS, "d@localhost", 99_999)  # not a member (yet)
    empty = [{"role": "replica", "node": "c@localhost", "offset": -1}]
    assert not rabbit_in_sync(empty, "c@localhost", -1)  # no baseline: never in sync
    assert not rabbit_in_sync([], "c@localhost", 5)


def test_streamlet_status() -> None:
    doc = {"streams": [{"name": "s", "members": [0, 1, 2], "in_sync": [0, 1]},
                       {"name": "t", "members": [0, 1]}]}
    assert streamlet_in_sync(doc, "s", 1)
    assert not streamlet_in_sync(doc, "s", 2)  # a member, not yet in sync
    assert streamlet_in_sync(doc, "t", 1) is None  # the status does not say
    assert streamlet_in_sync(doc, "gone", 1) is False
    learner = {"streams": [{"name": "s", "members": [0, 1], "in_sync": [0, 1, 2]}]}
    assert not streamlet_in_sync(learner, "s", 2)  # in step, but not in the member set


def test_add_member_row() -> None:
    row = add_member_row("streamlet", 100_000, 100_000, 1.4, 2.0, True, 3, {"added": 5})
    assert row.exact and row.seconds == 2.0 and row.moved == 100_000
    assert round(row.mb_s) == 50 and row.extra["mb_s"] == 50.0 and row.extra["added"] == 5
    assert "2.00 s to in sync" in row.label and "0.10 GB" in row.label
    never = add_member_row("rabbitmq", 100_000, 100_000, 1.0, None, False, 90, {})
    assert not never.exact and never.extra["add_s"] is None and "never" in never.label
    unread = add_member_row("streamlet", 100_000, 100_000, 1.0, 2.0, False, 1, {})
    assert not unread.exact  # in sync said, but the last message was not read there
    short = add_member_row("streamlet", 100_000, 99_000, 1.0, 2.0, True, 1, {})
    assert not short.exact  # the fill was not all confirmed


def _pair(s: float | None, r: float | None) -> dict[tuple[str, str], Row]:
    def one(server: str, v: float | None) -> Row:
        return add_member_row(server, 1_000_000, 1_000_000, 1.0, v, v is not None, 1, {})

    return {("r3-add-member", "streamlet"): one("streamlet", s),
            ("r3-add-member", "rabbitmq"): one("rabbitmq", r)}


def test_add_member_targets() -> None:
    met = add_member_targets(_pair(4.0, 5.0))
    assert met == ["MET  a member added to a stream of 1.00 GB is in sync in no more time than "
                   "RabbitMQ's add_replica: 4.00 s (250 MB/s) vs 5.00 s, 0.80x"]
    assert add_member_targets(_pair(6.0, 5.0))[0].startswith("MISS")
    assert add_member_targets(_pair(None, 5.0))[0].startswith("MISS")
    assert add_member_targets(_pair(6.0, None))[0].startswith("MET ")
    alone = _pair(4.0, 5.0)
    del alone[("r3-add-member", "rabbitmq")]
    assert add_member_targets(alone) == [
        "INFO streamlet adds a member to a stream of 1.00 GB in 4.00 s"]
    assert add_member_targets({}) == []
    s, r = _pair(4.0, 5.0).values()
    assert ratio(s, r) == ("time to in sync", 0.8)
    fast, slow, never = (add_member_row("s", 10, 10, 1.0, v, True, 1, {})
                         for v in (1.0, 2.0, None))
    assert sorted([never, slow, fast], key=_rank) == [fast, slow, never]
