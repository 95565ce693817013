"""retention.py's decisions: when a Stream's spec.retention needs a policy (and which keys),
the policy entry sent to each pod, whether a pod's answer holds it, and status.retention."""

from __future__ import annotations

import re
from typing import Any

import pytest

from streamlet_operator.model import Retention
from streamlet_operator.retention import (
    PRIORITY,
    definition_of,
    entry,
    holds,
    pattern,
    status_of,
    wanted,
)

DEFAULTS = Retention("7D", 0, 500_000_000)


@pytest.mark.parametrize(("spec", "created", "want"), [
    ({}, {}, None),
    ({"max-age": "1D"}, {"max-age": "1D"}, None),
    # the filter size is no retention: never a policy for it
    ({"stream-filter-size-bytes": "64"}, {"stream-filter-size-bytes": "32"}, None),
    ({"max-age": "2D"}, {"max-age": "1D"},
     {"max-age": "2D", "max-length-bytes": 0, "stream-max-segment-size-bytes": 500_000_000}),
    # a field removed from the spec: the Broker's default, as a stream made now
    ({}, {"max-length-bytes": "1000"},
     {"max-age": "7D", "max-length-bytes": 0, "stream-max-segment-size-bytes": 500_000_000}),
    ({"max-length-bytes": "12288", "stream-max-segment-size-bytes": "4096"},
     {"max-length-bytes": "1000000000", "stream-max-segment-size-bytes": "4096"},
     {"max-age": "7D", "max-length-bytes": 12288, "stream-max-segment-size-bytes": 4096}),
])
def test_when_a_policy_and_its_keys(spec: dict[str, str], created: dict[str, str],
                                    want: dict[str, Any] | None) -> None:
    assert wanted(spec, created, DEFAULTS) == want
    assert wanted(spec, created, Retention()) == (None if want is None else {
        **want, "max-age": spec.get("max-age", "0s")})


@pytest.mark.parametrize(("stream", "partitions", "matches", "not_matches"), [
    ("orders", 1, ["orders"], ["orders-0", "xorders", "orders2"]),
    ("a.b", 1, ["a.b"], ["axb"]),
    ("orders", 3, ["orders-0", "orders-12"], ["orders", "orders-x", "orders-1-1"]),
])
def test_the_pattern_names_the_resources_streams(stream: str, partitions: int,
                                                 matches: list[str],
                                                 not_matches: list[str]) -> None:
    p = pattern(stream, partitions)
    assert all(re.search(p, m) for m in matches)
    assert not any(re.search(p, m) for m in not_matches)


def test_entries_and_answers() -> None:
    definition = {"max-age": "7D", "max-length-bytes": 10, "stream-max-segment-size-bytes": 5}
    sent = entry("logs", "logs", 1, definition)
    assert (sent["name"], sent["priority"], sent["version"], sent["deleted"]) == (
        "k8s-stream-logs", PRIORITY, 0, False)
    held = {**sent, "version": 17, "origin": "b-0:5552"}
    assert holds([held], sent)
    assert not holds([{**held, "definition": {"max-age": "1D"}}], sent)
    assert not holds([], sent) and not holds([{**held, "deleted": True}], sent)
    gone = entry("logs", "logs", 1, None)
    assert holds([], gone) and holds([{**held, "deleted": True}], gone)
    assert not holds([held], gone)
    status = status_of("logs", definition)
    assert status == {"policy": "k8s-stream-logs", "maxAge": "7D", "maxLengthBytes": 10,
                      "maxSegmentSizeBytes": 5}
    assert definition_of(status) == definition
    assert status_of("logs", None) is None and definition_of(None) is None
