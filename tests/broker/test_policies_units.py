"""Policies' pure rules: what a PUT body may hold (RabbitMQ's shape and refusals), which policy
applies to a stream, the precedence of its keys over the Create arguments, and the merge of two
brokers' sets (the newest version of each entry wins, a deletion included)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from streamlet.broker.config.model import ConfigError
from streamlet.broker.policies.model import (
    Policy,
    PolicySet,
    check_definition,
    effective,
    effective_settings,
    from_json,
    parse,
)
from streamlet.broker.policies.store import Policies
from streamlet.core.settings import StreamSettings


def body(**kw: Any) -> dict[str, Any]:
    return {"pattern": "^s", "definition": {"max-age": "1h"}, **kw}


@pytest.mark.parametrize(("doc", "why"), [
    ([], "not a JSON object"),
    ({"definition": {"max-age": "1h"}}, "pattern is required"),
    (body(pattern="("), "not a valid regular expression"),
    (body(**{"apply-to": "topics"}), "apply-to must be one of"),
    (body(priority="high"), "priority must be an integer"),
    (body(priority=True), "priority must be an integer"),
    ({"pattern": "^s"}, "definition is required"),
    (body(definition={}), "no policy provided"),
    (body(definition=[]), "definition must be a JSON object"),
    (body(definition={"message-ttl": 5}), "['message-ttl'] are not recognised policy settings"),
    (body(definition={"max-age": "1 hour"}), '"1 hour" is not a valid max-age'),
    (body(definition={"max-age": 3600}), "3600 is not a valid max-age"),
    (body(definition={"max-length-bytes": -1}), "-1 is not a valid max-length-bytes"),
    (body(definition={"max-length-bytes": "10"}), '"10" is not a valid max-length-bytes'),
    (body(definition={"max-length-bytes": 1.5}), "1.5 is not a valid max-length-bytes"),
    (body(definition={"stream-max-segment-size-bytes": 0}),
     "0 is not a valid stream-max-segment-size-bytes"),
    (body(definition={"stream-max-segment-size-bytes": 3_000_000_001}),
     "is not a valid stream-max-segment-size-bytes"),
])
def test_refused_bodies_say_why(doc: Any, why: str) -> None:
    got = parse(doc, "/", "p")
    assert isinstance(got, str) and why in got


def test_a_valid_body_in_rabbitmqs_shape() -> None:
    doc = {"pattern": "^orders\\.", "apply-to": "streams", "priority": 3,
           "definition": {"max-age": "7D", "max-length-bytes": 10_000_000.0,
                          "stream-max-segment-size-bytes": 1_000_000}}
    got = parse(doc, "/", "retain")
    assert isinstance(got, Policy)
    assert got.view() == {"vhost": "/", "name": "retain", "pattern": "^orders\\.",
                          "apply-to": "streams", "priority": 3,
                          "definition": {"max-age": "7D", "max-length-bytes": 10_000_000,
                                         "stream-max-segment-size-bytes": 1_000_000}}
    defaults = parse({"pattern": "", "definition": {"max-age": "1s"}}, "v", "d")
    assert isinstance(defaults, Policy)
    assert (defaults.apply_to, defaults.priority) == ("all", 0)
    assert check_definition({"max-length-bytes": 0}) is None  # 0: no limit


def pol(name: str, pattern: str, priority: int = 0, apply_to: str = "all",
        vhost: str = "/", **definition: Any) -> Policy:
    return Policy(vhost, name, pattern, apply_to, priority,
                  {k.replace("_", "-"): v for k, v in definition.items()} or {"max-age": "1h"})


@pytest.mark.parametrize(("policies", "stream", "applies"), [
    ([], "orders", None),
    ([pol("a", "^ord")], "orders", "a"),
    ([pol("a", "ders")], "orders", "a"),  # a search, as RabbitMQ's re:run, not a full match
    ([pol("a", "^x")], "orders", None),
    ([pol("a", "^ord", 1), pol("b", ".*", 5)], "orders", "b"),  # the highest priority
    ([pol("b", ".*", 5), pol("a", "^ord", 5)], "orders", "a"),  # a tie: the first name
    ([pol("a", ".*", apply_to="exchanges")], "orders", None),
    ([pol("a", ".*", apply_to="quorum_queues")], "orders", None),
    ([pol("a", ".*", apply_to="queues")], "orders", "a"),
    ([pol("a", ".*", apply_to="streams")], "orders", "a"),
    ([pol("a", ".*", vhost="other")], "orders", None),
    ([pol("a", ".*", 9, vhost="other"), pol("b", ".*")], "orders", "b"),
])
def test_which_policy_applies(policies: list[Policy], stream: str, applies: str | None) -> None:
    got = effective(policies, "/", stream)
    assert (got.name if got else None) == applies


CREATED = StreamSettings(max_age_ms=3_600_000, max_length_bytes=5_000_000,
                         max_segment_size_bytes=1_000_000, filter_size=32)


@pytest.mark.parametrize(("definition", "runs"), [
    # the policy's key wins over the Create argument, larger or smaller (RabbitMQ's streams)
    ({"max-age": "2h"}, StreamSettings(7_200_000, 5_000_000, 1_000_000, 32)),
    ({"max-age": "1m"}, StreamSettings(60_000, 5_000_000, 1_000_000, 32)),
    ({"max-length-bytes": 100}, StreamSettings(3_600_000, 100, 1_000_000, 32)),
    ({"max-length-bytes": 10**12}, StreamSettings(3_600_000, 10**12, 1_000_000, 32)),
    ({"max-length-bytes": 0}, StreamSettings(3_600_000, None, 1_000_000, 32)),
    ({"stream-max-segment-size-bytes": 4096}, StreamSettings(3_600_000, 5_000_000, 4096, 32)),
    ({"max-age": "0s", "max-length-bytes": 7},
     StreamSettings(None, 7, 1_000_000, 32)),
])
def test_precedence_the_policy_over_the_arguments(definition: dict[str, Any],
                                                   runs: StreamSettings) -> None:
    policy = Policy("/", "p", ".*", definition=definition)
    assert effective_settings(CREATED, policy) == runs
    assert effective_settings(CREATED, None) == CREATED


def test_merge_keeps_the_newest_of_each_entry() -> None:
    a, b = PolicySet(), PolicySet()
    first = a.change(pol("p", "^a"), now_ms=1000, origin="a:1")
    assert b.merge([first]) == [first]
    assert b.merge([first]) == []  # the same version again: nothing taken
    newer = b.change(pol("p", "^b"), now_ms=500, origin="b:1")  # a clock behind still orders
    assert newer.version == 1001
    assert a.merge(b.entries.values()) == [newer] and a.get("/", "p") == newer
    gone = a.change(Policy("/", "p", deleted=True), now_ms=2000, origin="a:1")
    assert b.merge(a.entries.values()) == [gone]
    assert b.get("/", "p") is None and b.live() == []
    assert b.merge([newer]) == []  # an older version does not bring it back
    # a tie of versions: the origin decides, the same way on both sides
    x = Policy("/", "q", "^x", definition={"max-age": "1h"}, version=5, origin="a:1")
    y = Policy("/", "q", "^y", definition={"max-age": "1h"}, version=5, origin="b:1")
    left, right = PolicySet([x]), PolicySet([y])
    left.merge([y])
    right.merge([x])
    assert left.get("/", "q") == right.get("/", "q") == y


def test_entries_round_trip_and_bad_ones_are_refused() -> None:
    s = PolicySet()
    s.change(pol("p", "^a", 2, "streams", max_length_bytes=10), 1, "here")
    s.change(Policy("/", "gone", deleted=True), 2, "here")
    assert PolicySet.from_json(s.to_json()).entries == s.entries
    for bad in ({"vhost": "/", "name": "p"}, {"vhost": "/", "name": "p", "origin": "o"},
                {**s.entries[("/", "p")].to_json(), "definition": {"nope": 1}}, "x"):
        with pytest.raises(ValueError):
            from_json(bad)


def test_the_store_stamps_local_entries_keeps_them_and_reloads(tmp_path: Path) -> None:
    store = Policies(tmp_path, {}, origin="me:1")
    sent = Policy("/", "p", "^a", "streams", 1, {"max-age": "1h"})  # version 0: the operator's
    taken = store.merge([sent])
    assert [(p.name, p.origin) for p in taken] == [("p", "me:1")] and taken[0].version > 0
    assert store.merge([sent]) == []  # the same again: nothing changes, nothing is sent
    assert store.merge([Policy("/", "q", deleted=True)]) == []  # no such policy: no tombstone
    older = replace(taken[0], definition={"max-age": "2h"}, version=1, origin="peer:1")
    assert store.merge([older]) == []  # a peer's older version loses
    assert PolicySet.from_json(json.loads((tmp_path / "policies.json").read_bytes())
                               ).entries == store.set.entries
    again = Policies(tmp_path, {}, origin="me:1")  # what a restart reads
    assert again.set.get("/", "p") == taken[0]
    assert again.delete("/", "p") and not again.delete("/", "p")
    assert Policies(tmp_path, {}, origin="me:1").set.live() == []
    (tmp_path / "policies.json").write_text("[1]")
    with pytest.raises(ConfigError, match="policies.json cannot be read"):
        Policies(tmp_path, {}, origin="me:1")
