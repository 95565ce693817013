"""The local cluster's pure parts as tables: restart backoff, what `cluster up` accepts, each
node's command and configuration, the TOML written back, cluster.json, the status view."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from streamlet.cluster import state as state_file
from streamlet.cluster.backoff import BackoffPolicy, next_delay
from streamlet.cluster.plan import (
    MAX_NODES,
    PlanError,
    check_arguments,
    check_distinct,
    node_config,
    node_member,
    plan_nodes,
    settle_defaults,
)
from streamlet.cluster.state import ClusterState, NodeState, StateUnreadable
from streamlet.cluster.status import NodeStatus, table, to_json
from streamlet.cluster.tomlwrite import dumps

# (the delay before the run that ended, how long it ran) -> the delay before the next start
BACKOFF = [
    ("first exit", None, 0.1, 0.5),
    ("first exit after a long run", None, 100.0, 0.5),
    ("quick again: doubles", 0.5, 0.2, 1.0),
    ("doubles again", 1.0, 5.0, 2.0),
    ("capped", 8.0, 1.0, 10.0),
    ("stays capped", 10.0, 1.0, 10.0),
    ("just under the reset", 4.0, 29.9, 8.0),
    ("ran 30 s: starts over", 10.0, 30.0, 0.5),
    ("ran long: starts over", 2.0, 3600.0, 0.5),
]


@pytest.mark.parametrize(("what", "previous", "ran_for", "expected"), BACKOFF,
                         ids=[c[0] for c in BACKOFF])
def test_backoff(what: str, previous: float | None, ran_for: float, expected: float) -> None:
    assert next_delay(previous, ran_for) == expected


def test_backoff_sequence_of_a_crash_loop() -> None:
    delays: list[float] = []
    delay = None
    for _ in range(8):
        delay = next_delay(delay, 0.1)
        delays.append(delay)
    assert delays == [0.5, 1, 2, 4, 8, 10, 10, 10]
    policy = BackoffPolicy(initial=1, factor=3, maximum=5, reset_after=2)
    assert [next_delay(None, 0, policy), next_delay(1, 0, policy), next_delay(3, 0, policy),
            next_delay(5, 2, policy)] == [1, 3, 5, 1]


# (nodes, port) -> None when accepted, else a fragment of the refusal
ARGUMENTS = [
    (1, 5552, None),
    (3, 5552, None),
    (MAX_NODES, 5552, None),
    (0, 5552, "--nodes must be in 1..9, got 0"),
    (-1, 5552, "--nodes must be in 1..9"),
    (MAX_NODES + 1, 5552, "--nodes must be in 1..9, got 10"),
    (3, 0, "ports 0..2 are not all in 1..65535"),
    (3, 65533, None),
    (3, 65534, "ports 65534..65536"),
    (1, 65535, None),
    (1, 65536, "ports 65536..65536"),
]


@pytest.mark.parametrize(("nodes", "port", "refusal"), ARGUMENTS)
def test_arguments(nodes: int, port: int, refusal: str | None) -> None:
    if refusal is None:
        check_arguments(nodes, port)
    else:
        with pytest.raises(PlanError, match=refusal.replace(".", r"\.")):
            check_arguments(nodes, port)


def test_plan_nodes_and_their_commands(tmp_path: Path) -> None:
    specs = plan_nodes(3, "127.0.0.1", 6000, tmp_path)
    assert [(s.index, s.port, s.data_dir) for s in specs] == [
        (0, 6000, tmp_path / "node-0"), (1, 6001, tmp_path / "node-1"),
        (2, 6002, tmp_path / "node-2")]
    assert specs[1].log_file == tmp_path / "node-1" / "broker.log"
    assert specs[1].command("DEBUG", python="py") == [
        "py", "-m", "streamlet", "serve", "--host", "127.0.0.1", "--port", "6001",
        "--data-dir", str(tmp_path / "node-1"), "--config", str(tmp_path / "node-1" / "broker.toml"),
        "--advertised-host", "127.0.0.1", "--advertised-port", "6001", "--log-level", "DEBUG",
        "--metrics-port", "15693", "--http-port", "15673"]
    with pytest.raises(PlanError):
        plan_nodes(10, "127.0.0.1", 6000, tmp_path)
    moved = plan_nodes(2, "h", 6000, tmp_path, metrics_port=9100, http_port=0,
                       log_dir=tmp_path / "logs")
    assert [(s.metrics_port, s.http_port, s.log_file) for s in moved] == [
        (9100, 0, tmp_path / "logs" / "node-0.log"), (9101, 0, tmp_path / "logs" / "node-1.log")]
    assert moved[1].command(python="py")[-4:] == ["--metrics-port", "9101", "--http-port", "0"]
    assert moved[0].ports() == {"stream": 6000, "metrics": 9100}
    with pytest.raises(PlanError, match=r"--http-port: ports 65535\.\.65536"):
        plan_nodes(2, "h", 6000, tmp_path, http_port=65535)


# (nodes, --port, --metrics-port, --http-port, ports the machine has taken) -> each node's
# (metrics, http) after the defaults settled, and how many notes; the defaults are 15692+i and
# 15672+i, given ports (not None) are never turned off
SETTLED: list[tuple[str, int, int, int | None, int | None, set[int],
                    list[tuple[int, int]], int]] = [
    ("defaults free", 3, 5552, None, None, set(), [(15692, 15672), (15693, 15673),
                                                    (15694, 15674)], 0),
    ("a default taken: off on that node only", 3, 5552, None, None, {15673},
     [(15692, 15672), (15693, 0), (15694, 15674)], 1),
    ("both taken on node 0", 2, 5552, None, None, {15672, 15692},
     [(0, 0), (15693, 15673)], 2),
    ("a given port is not the defaults' business", 2, 5552, 9100, None, {9100, 15672},
     [(9100, 0), (9101, 15673)], 1),
    ("a default the stream ports use", 3, 15670, None, None, set(),
     [(15692, 0), (15693, 15673), (15694, 15674)], 1),
    ("0 turns every node's off", 2, 5552, 0, 0, set(), [(0, 0), (0, 0)], 0),
]


@pytest.mark.parametrize(("what", "nodes", "port", "metrics", "http", "taken", "expected",
                          "notes"), SETTLED, ids=[c[0] for c in SETTLED])
def test_settle_defaults(tmp_path: Path, what: str, nodes: int, port: int, metrics: int | None,
                         http: int | None, taken: set[int], expected: list[tuple[int, int]],
                         notes: int) -> None:
    specs = plan_nodes(nodes, "h", port, tmp_path,
                       metrics_port=15692 if metrics is None else metrics,
                       http_port=15672 if http is None else http)
    defaults = {f for f, given in (("metrics_port", metrics), ("http_port", http))
                if given is None}
    settled, said = settle_defaults(specs, defaults, taken)
    assert [(s.metrics_port, s.http_port) for s in settled] == expected
    assert len(said) == notes
    check_distinct(settled)


def test_settle_defaults_says_which_node_and_why(tmp_path: Path) -> None:
    specs = plan_nodes(2, "h", 5552, tmp_path)
    _, notes = settle_defaults(specs, {"http_port"}, {15673})
    assert notes == ["node 1: port 15673 is taken: no management API on node 1 (cluster up "
                     "--http-port P moves them, 0 turns them off)"]


@pytest.mark.parametrize(("kwargs", "refusal"), [
    ({"metrics_port": 5553}, "port 5553 would be both node 0's metrics port and node 1's "
                             "stream port"),
    ({"http_port": 9000, "metrics_port": 9001}, "port 9001 would be both node 0's metrics "
                                                "port and node 1's management API port"),
    ({"sbp_port": 15672}, "port 15672"),
])
def test_check_distinct_names_both(tmp_path: Path, kwargs: dict[str, Any], refusal: str) -> None:
    with pytest.raises(PlanError, match=refusal):
        check_distinct(plan_nodes(2, "h", 5552, tmp_path, **kwargs))


D = Path("/d/directory.json")
# the user's --config document -> the node's, or a fragment of the refusal
CONFIGS: list[tuple[str, dict[str, Any], dict[str, Any] | str]] = [
    ("none", {}, {"cluster": {"directory_file": str(D)}}),
    ("kept", {"server": {"heartbeat": 5}, "users": [{"name": "a", "password": "b"}]},
     {"server": {"heartbeat": 5}, "users": [{"name": "a", "password": "b"}],
      "cluster": {"directory_file": str(D)}}),
    ("other cluster keys kept", {"cluster": {"future": 1}},
     {"cluster": {"future": 1, "directory_file": str(D)}}),
    ("directory_file is up's", {"cluster": {"directory_file": "x.json"}},
     "cannot set cluster.directory_file"),
    ("tls would share a port", {"tls": {"certfile": "c", "keyfile": "k"}}, "[tls]"),
    ("listeners would share a port", {"listeners": {"rabbitmq": {"enabled": True}}},
     "[listeners]"),
    ("cluster not a table", {"cluster": 3}, "must be a table"),
    ("member is up's", {"cluster": {"member": 1}}, "cannot set cluster.member"),
    ("peers are up's", {"cluster": {"peers": []}}, "cannot set cluster.peers"),
]


@pytest.mark.parametrize(("what", "user", "expected"), CONFIGS, ids=[c[0] for c in CONFIGS])
def test_node_config(what: str, user: dict[str, Any], expected: dict[str, Any] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(PlanError) as e:
            node_config(user, D)
        assert expected in str(e.value)
    else:
        assert node_config(user, D) == expected


def test_node_i_is_member_i() -> None:
    doc = node_config({"cluster": {"future": 1}}, D)
    assert [node_member(doc, i)["cluster"] for i in (0, 2)] == [
        {"future": 1, "directory_file": str(D), "member": 0},
        {"future": 1, "directory_file": str(D), "member": 2}]
    assert "member" not in doc["cluster"], "the shared document is not changed"


TOML_DOCS: list[dict[str, Any]] = [
    {},
    {"cluster": {"directory_file": "/d/directory.json"}},
    {"server": {"host": "0.0.0.0", "port": 5552, "cluster_name": "a \"quoted\" \\ name\n\t\x01\x7f é 🙂"},
     "storage": {"fsync": "never"}, "retention": {"max_age": "7D", "max_length_bytes": 0}},
    {"users": [{"name": "a", "password": "b", "loopback_only": False},
               {"name": "c", "password": "d", "max_connections": 3}],
     "vhosts": [{"name": "/"}, {"name": "tenant-a"}],
     "permissions": [{"user": "a", "vhost": "/", "configure": "^app-", "read": ""}]},
    {"top": 1, "x": {"y": {"z": [1, 2.5, True, "s"], "empty": []}, "w": {}},
     "odd key.with dots": {"ok": -3, "inf": float("inf"), "neg": float("-inf")},
     "nested arrays": [{"a": [{"inline": 1}]}], "aot": [{"t": {"deep": 1}}]},
]


@pytest.mark.parametrize("doc", TOML_DOCS)
def test_toml_round_trip(doc: dict[str, Any]) -> None:
    text = dumps(doc)
    assert tomllib.loads(text) == doc, text


def test_toml_refuses_dates() -> None:
    import datetime

    with pytest.raises(ValueError, match="date"):
        dumps({"when": datetime.date(2026, 1, 1)})


def test_state_round_trip_and_atomic_write(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    assert state_file.read(path) is None
    s = ClusterState(42, "127.0.0.1", [NodeState(0, 6000, 100, True, 0, 1.5, 7000, 8000,
                                                 "/logs/node-0.log"),
                                       NodeState(1, 6001)])
    state_file.write(path, s)
    assert state_file.read(path) == s
    doc = json.loads(path.read_text())
    assert doc == {"supervisor_pid": 42, "host": "127.0.0.1", "nodes": [
        {"index": 0, "port": 6000, "pid": 100, "alive": True, "restarts": 0, "started_at": 1.5,
         "metrics_port": 7000, "http_port": 8000, "log": "/logs/node-0.log", "stopped": False},
        {"index": 1, "port": 6001, "pid": None, "alive": False, "restarts": 0,
         "started_at": 0.0, "metrics_port": 0, "http_port": 0, "log": "", "stopped": False}]}
    # a state written before the ports and the log were kept reads as theirs unknown
    old = {"supervisor_pid": 1, "host": "h", "nodes": [
        {"index": 0, "port": 1, "pid": None, "alive": False}]}
    path.write_text(json.dumps(old))
    assert state_file.read(path) == ClusterState(1, "h", [NodeState(0, 1)])
    s.nodes[1].pid, s.nodes[1].restarts = 101, 2
    state_file.write(path, s)
    assert state_file.read(path) == s
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]  # no temporary left


@pytest.mark.parametrize("text", ["", "{", "[]", '{"host": "h"}',
                                  '{"supervisor_pid": 1, "host": "h", "nodes": [{"index": 0}]}',
                                  '{"supervisor_pid": "x", "host": "h", "nodes": []}'])
def test_state_unreadable(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(text)
    with pytest.raises(StateUnreadable):
        state_file.read(path)


def test_status_view() -> None:
    s = ClusterState(42, "127.0.0.1", [])
    nodes = [NodeStatus(0, 6000, 100, True, True, 0, 1000.0, 7000, 8000, "/l/node-0.log"),
             NodeStatus(1, 6001, 101, True, False, 2, 1090.0, 7001, 8001, "/l/node-1.log"),
             NodeStatus(2, 6002, 102, False, False, 1, 1000.0, 0, 8002, "/l/node-2.log"),
             NodeStatus(3, 6003, None, False, False, 0, 0.0)]
    assert [(n.alive, n.condition) for n in nodes] == [
        (True, "up"), (False, "starting"), (False, "down"), (False, "down")]
    assert to_json(nodes, []) == {"nodes": [
        {"index": 0, "pid": 100, "port": 6000, "alive": True, "metrics_port": 7000,
         "http_port": 8000, "log": "/l/node-0.log"},
        {"index": 1, "pid": 101, "port": 6001, "alive": False, "metrics_port": 7001,
         "http_port": 8001, "log": "/l/node-1.log"},
        {"index": 2, "pid": 102, "port": 6002, "alive": False, "metrics_port": None,
         "http_port": 8002, "log": "/l/node-2.log"},
        {"index": 3, "pid": None, "port": 6003, "alive": False, "metrics_port": None,
         "http_port": None, "log": None}], "streams": []}
    assert table(s, nodes, now=1100.0) == (
        "supervisor pid 42, nodes on 127.0.0.1\n"
        "node  pid  port  metrics  http  state     restarts  up for  log\n"
        "0     100  6000  7000     8000  up        0         1m40s   /l/node-0.log\n"
        "1     101  6001  7001     8001  starting  2         10s     /l/node-1.log\n"
        "2     102  6002  -        8002  down      1         -       /l/node-2.log\n"
        "3     -    6003  -        -     down      0         -       -\n")


def test_status_table_marks_an_unclean_leader() -> None:
    s = ClusterState(42, "127.0.0.1", [])
    streams = [{"name": "a", "epoch": 3, "leader": 2, "members": [0, 1, 2], "committed": 7,
                "unclean": True},
               {"name": "b", "epoch": 1, "leader": None, "members": [0, 1], "committed": None,
                "unclean": False}]
    assert table(s, [], now=0.0, streams=streams).splitlines()[-3:] == [
        "stream  epoch  leader       members  committed  in sync  changing",
        "a       3      2 (unclean)  0,1,2    7          -        -",
        "b       1      electing     0,1      -          -        -"]


def test_a_node_kept_down_by_stop_node_is_stopped_not_down() -> None:
    from streamlet.cluster.status import NodeStatus

    held = NodeStatus(1, 6001, 101, False, False, 0, 0.0, stopped=True)
    assert held.condition == "stopped" and not held.alive
    assert NodeStatus(1, 6001, 101, True, False, 0, 0.0, stopped=True).condition == "starting"
    assert NodeStatus(1, 6001, None, False, False, 0, 0.0).condition == "down"


def test_status_table_shows_members_in_sync_and_the_change_under_way() -> None:
    s = ClusterState(42, "127.0.0.1", [])
    streams = [{"name": "a", "epoch": 3, "leader": 0, "members": [0, 1, 2], "committed": 7,
                "unclean": False, "in_sync": [0, 1],
                "changing": {"add": 3, "step": "member 3 catching up: chunk 5 of 9"}}]
    assert table(s, [], now=0.0, streams=streams).splitlines()[-1] == (
        "a       3      0       0,1,2    7          0,1      add 3: member 3 catching up: "
        "chunk 5 of 9")


def test_requests_round_trip_and_a_bad_file_is_dropped(tmp_path: Path) -> None:
    from streamlet.cluster import requests
    from streamlet.cluster.requests import ELECT, TRANSFER, Request

    moved = Request(TRANSFER, "a/b", to=2)
    path = requests.write(tmp_path, moved)
    assert path.name == "transfer-a%2Fb.json"
    requests.write(tmp_path, Request(ELECT, "a/b", force=True))
    (tmp_path / "requests" / "junk.json").write_text("{")
    (tmp_path / "requests" / "other.json").write_text('{"kind": "delete", "stream": "x"}')
    assert requests.read(tmp_path) == [Request(ELECT, "a/b", force=True), moved]
    assert sorted(p.name for p in (tmp_path / "requests").iterdir()) == [
        "elect-a%2Fb.json", "transfer-a%2Fb.json"], "malformed and unknown requests removed"
    requests.done(tmp_path, moved)
    assert requests.read(tmp_path) == [Request(ELECT, "a/b", force=True)]
    assert requests.outcome(tmp_path, moved) is None  # done as asked: nothing said
    node = Request(requests.STOP_NODE, to=1, wipe=True)
    assert requests.write(tmp_path, node).name == "stop-node-1.json"
    assert requests.read(tmp_path) == [Request(ELECT, "a/b", force=True)], "the supervisor's"
    assert requests.read(tmp_path, requests.NODE_KINDS) == [node]
    requests.done(tmp_path, node)
    grow = Request(requests.MEMBERS, "a", to=3, change="add")
    assert requests.write(tmp_path, grow).name == "members-a.json"
    assert requests.read(tmp_path) == [Request(ELECT, "a/b", force=True), grow]
    requests.done(tmp_path, grow)
    (tmp_path / "requests" / "members-b.json").write_text(
        '{"kind": "members", "stream": "b", "to": 1, "change": "move"}')
    assert requests.read(tmp_path) == [Request(ELECT, "a/b", force=True)], "malformed: dropped"
    requests.write(tmp_path, moved)
    requests.done(tmp_path, moved, "member 2 is not running")
    assert requests.read(tmp_path) == [Request(ELECT, "a/b", force=True)], "not a request"
    assert requests.outcome(tmp_path, moved) == "member 2 is not running"
    assert requests.outcome(tmp_path, moved) is None, "taken once"
