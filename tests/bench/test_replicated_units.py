"""The replicated workload's pure parts: where the leader is, and the failover arithmetic."""

from __future__ import annotations

from bench.failover import failover_seconds, leader_port
from bench.replicated import failover_row
from bench.report import replicated_targets
from bench.run import _rank
from bench.servers import _pid_of_port, leader_from_directory
from bench.workloads import Row
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import NO_LEADER, Code


def test_leader_from_directory() -> None:
    doc = {"streams": {"s": {"epoch": 2, "leader": "127.0.0.1:5553",
                             "replicas": ["127.0.0.1:5552", "127.0.0.1:5554"]},
                       "electing": {"epoch": 3, "leader": None, "replicas": []}}}
    assert leader_from_directory(doc, "s") == 5553
    assert leader_from_directory(doc, "electing") is None
    assert leader_from_directory(doc, "absent") is None
    assert leader_from_directory({}, "s") is None
    assert leader_from_directory({"streams": {"s": {"leader": "nonsense"}}}, "s") is None


def test_pid_of_port() -> None:
    assert _pid_of_port([(5552, 10), (5553, 11)], 5553) == 11
    assert _pid_of_port([(5552, 10)], 5554) == 0


def test_leader_port_from_metadata() -> None:
    brokers = [f.BrokerInfo(0, "127.0.0.1", 5552), f.BrokerInfo(1, "127.0.0.1", 5553)]
    answer = f.MetadataResponse(1, brokers, [f.StreamMetadata("s", Code.OK, 1, [0])])
    assert leader_port(answer, "s") == 5553
    assert leader_port(answer, "other") is None
    electing = f.MetadataResponse(1, brokers, [f.StreamMetadata("s", Code.OK, NO_LEADER, [])])
    assert leader_port(electing, "s") is None
    gone = f.MetadataResponse(1, brokers, [f.StreamMetadata("s", Code.STREAM_DOES_NOT_EXIST,
                                                             NO_LEADER, [])])
    assert leader_port(gone, "s") is None


def test_failover_seconds() -> None:
    assert failover_seconds(100.0, 100.75) == 0.75
    assert failover_seconds(100.0, 0.0) is None  # no confirm from a new leader
    assert failover_seconds(0.0, 100.0) is None  # nothing was killed
    assert failover_seconds(100.0, 99.0) is None  # a confirm before the kill is not new


def test_failover_row() -> None:
    res = {"t0": 10.0, "t1": 16.0, "lost_at": 13.01, "reattached_at": 13.5,
           "first_new_confirm": 13.6, "sent_before": 30_000, "confirmed_before": 29_000,
           "sent_after": 25_000, "confirmed_after": 25_000, "errors_after": 0, "attempts": 7}
    row = failover_row("streamlet", 100, 10_000, 13.0, 42, res)
    assert round(row.extra["failover_ms"]) == 600
    assert row.extra["lost_ms"] == 10.0 and row.extra["reattached_ms"] == 500.0
    assert row.extra["unconfirmed_at_kill"] == 1_000
    assert row.exact and row.seconds == 2.5
    assert "600 ms" in row.label
    never = failover_row("rabbitmq", 100, 10_000, 13.0, 42, {"t0": 10.0, "t1": 70.0})
    assert never.extra["failover_ms"] is None and not never.exact


def _row(key: str, server: str, msg_s: float = 0.0, **extra: float | None) -> Row:
    r = Row(key, key, server, 100, int(msg_s), sent=int(msg_s), confirmed=int(msg_s),
            seconds=1.0)
    r.extra.update(extra)
    return r


def test_replicated_targets_and_ranking() -> None:
    rows = [_row("r3-publish-100", "rabbitmq", 500_000), _row("r3-publish-100", "streamlet",
                                                              1_000_000),
            _row("r3-failover", "rabbitmq", failover_ms=800.0),
            _row("r3-failover", "streamlet", failover_ms=900.0),
            _row("publish-100", "streamlet", 4_000_000)]
    lines = replicated_targets({(r.workload, r.server): r for r in rows})
    assert lines[0].startswith("MET  publish-100 with 3 replicas") and "2.00x" in lines[0]
    assert lines[1].startswith("MISS failover") and "900 ms vs 800 ms" in lines[1]
    assert any("RF=3 / RF=1: 0.25" in line for line in lines)
    fast, slow, none = (_row("r3-failover", "s", failover_ms=v) for v in (1.0, 2.0, None))
    assert sorted([none, slow, fast], key=_rank) == [fast, slow, none]
