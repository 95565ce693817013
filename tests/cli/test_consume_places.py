"""Where `streamlet consume` looks for its stream after losing its broker, and which endings
it looks at all for: pure rules, as tables."""

from __future__ import annotations

import pytest

from streamlet.cli.rabbitmq.consume import candidates, resumable
from streamlet.client import ConnectionClosed, StreamletError
from streamlet.rabbitmq import Code

A, B, C, GIVEN = ("h", 1), ("h", 2), ("h", 3), ("g", 9)


@pytest.mark.parametrize(("known", "lost", "order"), [
    ([A, B, C], A, [B, C, GIVEN, A]),  # the leader lost: its replicas first, itself last
    ([A, B, C], C, [A, B, GIVEN, C]),  # a replica lost: the leader first
    ([A, B, C], GIVEN, [A, B, C, GIVEN]),
    ([A, GIVEN], A, [GIVEN, A]),  # each once
    ([], A, [GIVEN, A]),  # no member known (a single broker): where it was told, then again
    ([B], None, [B, GIVEN]),
])
def test_candidates(known: list[tuple[str, int]], lost: tuple[str, int] | None,
                    order: list[tuple[str, int]]) -> None:
    assert candidates(known, lost, GIVEN) == order


@pytest.mark.parametrize(("error", "resumes"), [
    (ConnectionClosed(Code.STREAM_NOT_AVAILABLE, "connection lost"), True),  # its broker died
    (StreamletError(Code.STREAM_NOT_AVAILABLE, "stream 's' is not available"), True),  # moved
    (ConnectionClosed(Code.OK, "closed by the server: Closed via management API"), False),
    (StreamletError(Code.STREAM_DOES_NOT_EXIST), False),  # deleted
    (StreamletError(Code.ACCESS_REFUSED), False),
    (StreamletError(Code.INTERNAL_ERROR, "chunk 3 of s: bad CRC"), False),
    (ValueError("x"), False),
])
def test_resumable(error: BaseException, resumes: bool) -> None:
    assert resumable(error) is resumes
