"""A member's saved replication state read back: what is a state, and what is refused with a
ValueError naming the file (the broker then sets the stream aside): a table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamlet.broker.replication.member import FILE, MemberState, Role, parse

GOOD = {"epoch": 3, "role": "follower", "members": [0, 1, 2], "leader": ["b-0", 5552]}


@pytest.mark.parametrize(("doc", "state"), [
    pytest.param(GOOD, MemberState(3, Role.FOLLOWER, ("b-0", 5552), (0, 1, 2)), id="follower"),
    pytest.param({"epoch": 1, "role": "leader", "members": [0], "leader": ["h", 1]},
                 MemberState(1, Role.LEADER, ("h", 1), (0,)), id="leader"),
    pytest.param({"epoch": 7}, MemberState(7, Role.FENCED), id="fenced by default"),
])
def test_read(doc: object, state: MemberState) -> None:
    assert parse(doc) == state


@pytest.mark.parametrize(("doc", "why"), [
    pytest.param([], "not a JSON object", id="a list"),
    pytest.param({**GOOD, "epoch": 0}, "epoch 0", id="epoch 0"),
    pytest.param({**GOOD, "epoch": "3"}, "epoch '3'", id="epoch a string"),
    pytest.param({**GOOD, "epoch": True}, "epoch True", id="epoch a boolean"),
    pytest.param({k: v for k, v in GOOD.items() if k != "epoch"}, "epoch None", id="no epoch"),
    pytest.param({**GOOD, "members": 3}, "members 3", id="members not a list"),
    pytest.param({**GOOD, "members": [0, "1"]}, "members", id="a member id a string"),
    pytest.param({**GOOD, "members": [-1]}, "members", id="a negative member id"),
    pytest.param({**GOOD, "leader": 5}, "leader 5", id="leader a number"),
    pytest.param({**GOOD, "leader": ["h"]}, "leader", id="leader without a port"),
    pytest.param({**GOOD, "leader": ["h", 0]}, "leader", id="port 0"),
    pytest.param({**GOOD, "leader": [1, 2]}, "leader", id="host a number"),
    pytest.param({**GOOD, "role": "king"}, "role 'king'", id="an unknown role"),
])
def test_refused(doc: object, why: str) -> None:
    with pytest.raises(ValueError) as e:
        parse(doc)
    assert why in str(e.value)


@pytest.mark.parametrize("content", [b"", b"{", b"\xff\xfe", b"null", b'{"epoch": 0}'])
def test_a_file_that_is_no_state_names_itself(tmp_path: Path, content: bytes) -> None:
    (tmp_path / FILE).write_bytes(content)
    with pytest.raises(ValueError, match="not a replication state") as e:
        MemberState.load(tmp_path)
    assert str(tmp_path / FILE) in str(e.value)


def test_saved_and_read_back(tmp_path: Path) -> None:
    state = MemberState(4, Role.LEADER, ("b-1", 5552), (0, 1))
    state.save(tmp_path)
    assert MemberState.load(tmp_path) == state
    assert json.loads((tmp_path / FILE).read_text())["epoch"] == 4
    assert MemberState.load(tmp_path / "none") is None
