"""The kind test's pure helpers (checks.py), without a cluster: the client pod's producer
script prints the bodies expected, the consumer's log read back, and a replicated Stream's
status read for its leader and a failover."""

from __future__ import annotations

import contextlib
import io
import shlex
from typing import Any

import pytest

from tests.e2e.checks import Consumed, Leadership, bodies, produce_script


def test_bodies_are_numbered_from_one_and_sort_as_numbers() -> None:
    made = bodies("before", 1200)
    assert made[0] == "before-000001" and made[-1] == "before-001200"
    assert sorted(made) == made and len(set(made)) == 1200


def test_the_produce_script_pipes_the_bodies_into_the_cli() -> None:
    script = produce_script("after", 25, "payments", ["--host", "ha.apps.svc", "--user", "app",
                                                      "--password", "p w"])
    python, pipe, cli = script.partition(" | ")
    assert pipe
    assert shlex.split(cli) == ["streamlet", "produce", "payments", "--host", "ha.apps.svc",
                                "--user", "app", "--password", "p w"]
    argv = shlex.split(python)
    assert argv[:2] == ["python", "-c"] and len(argv) == 3
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(argv[2], {})  # the generator the pod's python runs
    assert out.getvalue().splitlines() == bodies("after", 25)


LOG = """streamlet: payments is on ha-1.ha-headless.apps.svc.cluster.local:5552
0\tbefore-000001
1\tbefore-000002
2\tbefore-000003
3\tafter-000001
note: a line with\ta tab but no offset
4\tafter-000002
"""


def test_the_consumers_log_read_back() -> None:
    consumed = Consumed.parse(LOG)
    assert consumed.offsets == (0, 1, 2, 3, 4)
    assert consumed.bodies == ("before-000001", "before-000002", "before-000003",
                               "after-000001", "after-000002")
    assert consumed.in_order() and consumed.duplicates() == []
    assert consumed.lost(bodies("before", 3) + bodies("after", 2)) == []


def test_what_was_lost_duplicated_or_out_of_order() -> None:
    consumed = Consumed.parse("0\ta-000001\n2\ta-000003\n1\ta-000001\n")
    assert consumed.lost(bodies("a", 4)) == ["a-000002", "a-000004"]
    assert consumed.duplicates() == ["a-000001"]
    assert not consumed.in_order()
    assert Consumed.parse("").lost(["x"]) == ["x"]


def _stream(replication: dict[str, Any] | None) -> dict[str, Any]:
    status: dict[str, Any] = {"leader": "ha-0"}
    if replication is not None:
        status["replication"] = replication
    return {"metadata": {"name": "payments"}, "status": status}


READY = {"epoch": 1, "leader": 0, "members": [0, 1, 2], "inSync": [0, 1, 2], "phase": "Ready"}


@pytest.mark.parametrize(("replication", "settled"), [
    (READY, True),
    ({**READY, "inSync": [0, 1]}, False),
    ({**READY, "members": [0, 1], "inSync": [0, 1]}, False),
    ({**READY, "leader": None, "phase": "Electing"}, False),
    ({**READY, "phase": "Unavailable"}, False),
], ids=["ready", "one-behind", "two-members", "electing", "unavailable"])
def test_settled(replication: dict[str, Any], settled: bool) -> None:
    leadership = Leadership.of(_stream(replication))
    assert leadership is not None and leadership.settled(3) is settled


@pytest.mark.parametrize("stream", [
    {"metadata": {"name": "payments"}}, _stream(None), _stream({}), _stream({"phase": "Ready"}),
], ids=["no-status", "not-replicated", "empty", "no-epoch"])
def test_no_leadership_recorded_yet(stream: dict[str, Any]) -> None:
    assert Leadership.of(stream) is None


@pytest.mark.parametrize(("replication", "failed_over"), [
    ({**READY, "epoch": 2, "leader": 1, "inSync": [1, 2]}, True),
    ({**READY, "epoch": 3, "leader": 0}, True),  # led by the first again, in a later epoch
    ({**READY, "epoch": 2, "leader": None, "phase": "Electing"}, False),
    ({**READY, "epoch": 2, "leader": 1, "phase": "Unavailable"}, False),
    (READY, False),  # the same epoch: nothing happened yet
], ids=["new-leader", "later-epoch", "electing", "unavailable", "same-epoch"])
def test_a_failover_is_a_later_led_epoch(replication: dict[str, Any], failed_over: bool) -> None:
    before = Leadership.of(_stream(READY))
    after = Leadership.of(_stream(replication))
    assert before is not None and after is not None
    assert after.after(before) is failed_over

