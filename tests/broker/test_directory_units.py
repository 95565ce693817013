"""The stream directory: parsing, Metadata answers with consistent broker references, reloads."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest

from streamlet.broker.directory import (
    EMPTY,
    Directory,
    DirectoryError,
    DirectoryFile,
    Placement,
    answer_metadata,
    parse,
)
from streamlet.broker.replication.create import placement_for
from streamlet.rabbitmq import Code
from streamlet.rabbitmq.constants import NO_LEADER
from streamlet.replication.placement import Locator

HERE = ("b-0.h", 5552)


def test_parse_streams_vhosts_and_super_streams() -> None:
    d = parse(json.dumps({
        "streams": {"orders": "b-1.h:5552", "tenant/audit": "[::1]:6000"},
        "super_streams": {"inv": {"partitions": ["inv-0", "inv-1"], "binding_keys": ["0", "1"]}},
    }))
    assert d.leader("/", "orders") == ("b-1.h", 5552)
    assert d.leader("tenant", "audit") == ("::1", 6000)
    assert d.leader("tenant", "orders") is None and d.leader("/", "audit") is None
    ss = d.super_stream("/", "inv")
    assert ss is not None and ss.partitions == ("inv-0", "inv-1") and ss.route("1") == ["inv-1"]


@pytest.mark.parametrize("text, where", [
    ("{", "not JSON"),
    ("[]", "JSON object"),
    ('{"streams": {"s": "nohostport"}}', "streams['s']"),
    ('{"streams": {"s": "h:99999"}}', "streams['s']"),
    ('{"streams": []}', "must be objects"),
    ('{"super_streams": {"x": {"partitions": ["a"], "binding_keys": []}}}', "super_streams['x']"),
    ('{"zones": {"a": "eu-1a"}}', "'zones' must map member ids"),
    ('{"zones": {"0": ""}}', "'zones' must map member ids"),
    ('{"zones": ["eu-1a"]}', "'zones' must map member ids"),
])
def test_parse_refuses_bad_content(text: str, where: str) -> None:
    with pytest.raises(DirectoryError, match=re.escape(where)):
        parse(text)


def test_metadata_answer_assigns_one_reference_per_address() -> None:
    directory = {"a": ("b-1.h", 5552), "b": ("b-2.h", 5552), "c": ("b-1.h", 5552),
                 "stale": HERE}
    answer = answer_metadata(["a", "local", "b", "c", "missing", "stale"],
                             lambda n: n == "local", HERE, directory.get)
    brokers = {ref: (host, port) for ref, host, port in answer.brokers}
    assert len(brokers) == len(answer.brokers) == 3  # b-1, here, b-2: each once
    by_name = {name: (code, leader) for name, code, leader, _ in answer.streams}
    assert brokers[by_name["a"][1]] == brokers[by_name["c"][1]] == ("b-1.h", 5552)
    assert brokers[by_name["b"][1]] == ("b-2.h", 5552)
    assert brokers[by_name["local"][1]] == HERE
    assert by_name["missing"] == by_name["stale"] == (Code.STREAM_DOES_NOT_EXIST, NO_LEADER)
    assert [n for n, *_ in answer.streams] == ["a", "local", "b", "c", "missing", "stale"]


def test_metadata_answer_lists_this_broker_when_nothing_is_found() -> None:
    answer = answer_metadata(["x"], lambda n: False, HERE, lambda n: None)
    assert answer.brokers == [(0, *HERE)]
    assert answer.streams == [("x", Code.STREAM_DOES_NOT_EXIST, NO_LEADER, [])]


def test_a_replicated_stream_is_answered_with_its_leader_and_replicas() -> None:
    placements = {"r": Placement(3, ("b-1.h", 5552), (HERE, ("b-2.h", 5552))),
                  "electing": Placement(4, None, (("b-1.h", 5552),))}
    answer = answer_metadata(["r", "electing", "local"], lambda n: n in ("r", "local"), HERE,
                             lambda n: None, placements.get)
    brokers = {ref: (host, port) for ref, host, port in answer.brokers}
    by_name = {name: (code, leader, replicas) for name, code, leader, replicas in answer.streams}
    code, leader, replicas = by_name["r"]
    assert code == Code.OK and brokers[leader] == ("b-1.h", 5552), "the placement, not 'held here'"
    assert [brokers[r] for r in replicas] == [HERE, ("b-2.h", 5552)]
    assert by_name["electing"][:2] == (Code.OK, NO_LEADER), "clients retry while it is elected"
    assert brokers[by_name["local"][1]] == HERE and by_name["local"][2] == []


def test_parse_replicated_entries() -> None:
    d = parse(json.dumps({"streams": {
        "r": {"epoch": 2, "leader": "b-0:5552", "replicas": ["b-1:5552", "[::1]:5553"]},
        "e": {"epoch": 3, "leader": None},
        "plain": "b-2:5552"}}))
    assert d.placement("/", "r") == Placement(2, ("b-0", 5552), (("b-1", 5552), ("::1", 5553)))
    assert d.leader("/", "r") == ("b-0", 5552) and d.leader("/", "e") is None
    assert d.placement("/", "e") == Placement(3, None) and d.placement("/", "plain") is None
    assert d.leader("/", "plain") == ("b-2", 5552)


@pytest.mark.parametrize("entry, where", [
    ({"leader": "b:1"}, "epoch"), ({"epoch": 0, "leader": "b:1"}, "epoch"),
    ({"epoch": True, "leader": "b:1"}, "epoch"), ({"epoch": 1, "leader": "b"}, "host:port"),
    ({"epoch": 1, "leader": "b:1", "replicas": "b:2"}, "replicas"),
])
def test_parse_refuses_bad_replicated_entries(entry: dict[str, object], where: str) -> None:
    with pytest.raises(DirectoryError, match=where):
        parse(json.dumps({"streams": {"r": entry}}))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _write(path: Path, doc: object, mtime_ns: int) -> None:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_file_reloads_on_change_at_most_once_a_second_and_keeps_the_last_good(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path, clock = tmp_path / "streams.json", Clock()
    df = DirectoryFile(path, clock)
    caplog.set_level(logging.WARNING, "streamlet.broker")
    assert df.current() == EMPTY  # missing: empty, logged
    assert "No such file" in caplog.text
    _write(path, {"streams": {"s": "h1:1"}}, 10**18)
    assert df.current() == EMPTY  # not looked at again within the second
    clock.now = 1.0
    assert df.current().leader("/", "s") == ("h1", 1)
    _write(path, "{broken", 2 * 10**18)
    clock.now = 2.0
    caplog.clear()
    assert df.current().leader("/", "s") == ("h1", 1)  # the last good one
    assert "not JSON" in caplog.text
    clock.now = 3.0
    caplog.clear()
    assert df.current().leader("/", "s") == ("h1", 1)
    assert caplog.text == ""  # the same problem is logged once
    _write(path, {"streams": {"s": "h2:2"}}, 3 * 10**18)
    clock.now = 4.0
    assert df.current() == Directory({"s": ("h2", 2)}, {})


def test_zones_place_a_replicated_create_over_distinct_zones() -> None:
    """The zones the operator writes reach the Create's placement: three members over zones
    a, a, b, c go to three zones (not to members 0 and 1, which share one)."""
    peers = tuple(("127.0.0.1", 5552 + i) for i in range(4))
    zoned = parse(json.dumps({"zones": {"0": "a", "1": "a", "2": "b", "3": "c"}}))
    assert zoned.zones == {0: "a", 1: "a", 2: "b", 3: "c"}
    assert placement_for(peers, 0, zoned, 3, Locator.CLIENT_LOCAL).members == (0, 2, 3)
    assert placement_for(peers, 0, EMPTY, 3, Locator.CLIENT_LOCAL).members == (0, 1, 2)
