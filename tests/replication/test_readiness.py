"""A broker's readiness (its pod's readinessProbe), as a table: serving, and every replicated
stream it follows in sync or with no reachable leader for a while."""

from __future__ import annotations

import pytest

from streamlet.broker.http import Request
from streamlet.broker.http.messages import parse_head
from streamlet.broker.metrics.http import metrics_answer
from streamlet.replication.readiness import (
    LEADERLESS_S,
    LINK_FRESH_S,
    MemberView,
    Readiness,
    holds_back,
    readiness,
)


def follower(heard: float | None, waiting: float, caught_up: bool,
             learner: bool = False) -> MemberView:
    return MemberView("s", "follower", learner, heard, waiting, caught_up)


MEMBERS = [
    # (what, member, held back: the reason's words, or None)
    ("a leader", MemberView("s", "leader"), None),
    ("a follower linked and holding the commit point", follower(0.5, 0.5, True), None),
    ("a follower linked, catching up", follower(0.5, 0.5, False), "catching up"),
    ("a learner catching up holds nothing", follower(0.5, 0.5, False, learner=True), None),
    ("a follower whose link is being made", follower(None, 3.0, False), "reaching its leader"),
    ("a link silent past LINK_FRESH_S is no link", follower(LINK_FRESH_S, LINK_FRESH_S, True),
     "reaching its leader"),
    ("no reachable leader for LEADERLESS_S: nothing to be out of sync with",
     follower(None, LEADERLESS_S, False), None),
    ("a silent link past LEADERLESS_S, behind: ready",
     follower(LEADERLESS_S, LEADERLESS_S, False), None),
    ("fenced (restarted, waiting for its role)", MemberView("s", "fenced", waiting_s=2.0),
     "waiting for its role"),
    ("fenced with nobody assigning it: ready in the end",
     MemberView("s", "fenced", waiting_s=LEADERLESS_S + 1), None),
]


@pytest.mark.parametrize("member,reason", [row[1:] for row in MEMBERS],
                         ids=[row[0] for row in MEMBERS])
def test_what_holds_a_broker_back(member: MemberView, reason: str | None) -> None:
    why = holds_back(member)
    if reason is None:
        assert why is None
    else:
        assert why is not None and reason in why and why.startswith("s: "), why


@pytest.mark.parametrize("serving,members,ready,reasons", [
    (True, [], True, ()),  # a standalone broker
    (False, [], False, ("not serving yet",)),
    (True, [MemberView("a", "leader"), follower(0.2, 0.2, True)], True, ()),
    (True, [MemberView("b", "follower", False, 0.2, 0.2, False), MemberView(
        "a", "fenced", waiting_s=1.0)], False,
     ("a: waiting for its role (1s)", "b: catching up with its leader")),
])
def test_readiness(serving: bool, members: list[MemberView], ready: bool,
                   reasons: tuple[str, ...]) -> None:
    assert readiness(serving, members) == Readiness(ready, reasons)


def _get(path: str) -> Request:
    request = parse_head(f"GET {path} HTTP/1.1\r\n\r\n".encode())
    assert request is not None
    return request


@pytest.mark.parametrize("answer,status,body", [
    (Readiness(True), 200, b"ready\n"),
    (Readiness(False, ("s: catching up with its leader",)), 503,
     b"not ready: s: catching up with its leader\n"),
])
def test_the_ready_endpoint(answer: Readiness, status: int, body: bytes) -> None:
    response = metrics_answer(_get("/ready"), lambda: b"m 1\n", "text/plain", lambda: answer)
    assert (response.status, response.body) == (status, body)
    metrics = metrics_answer(_get("/metrics"), lambda: b"m 1\n", "text/plain", lambda: answer)
    assert (metrics.status, metrics.body) == (200, b"m 1\n")
