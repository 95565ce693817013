"""Deposing a leader the driver cannot reach, by its followers' reports, as a table."""

from __future__ import annotations

import pytest

from streamlet.replication.liveness import Contact, leader_lost

T = 3.0  # seconds without hearing from the leader before a follower stops vouching
ON = Contact(4, True, 0.2)  # follows in epoch 4, heard from its leader 0.2 s ago
LINK_DOWN = Contact(4, True, None)
SILENT = Contact(4, True, 3.5)  # linked, but nothing for longer than T (a stopped leader)

# (members, reports, expected); epoch 4, leader 0
TABLE = [
    pytest.param([0, 1, 2], {1: ON, 2: ON}, False, id="rf3: both followers in contact"),
    pytest.param([0, 1, 2], {1: ON, 2: None}, False,
                 id="rf3: one follower in contact: leader and it are a quorum"),
    pytest.param([0, 1, 2], {1: ON}, False, id="rf3: the other not asked: one is enough"),
    pytest.param([0, 1, 2], {1: LINK_DOWN, 2: LINK_DOWN}, True, id="rf3: both links down"),
    pytest.param([0, 1, 2], {1: SILENT, 2: LINK_DOWN}, True, id="rf3: silent and down"),
    pytest.param([0, 1, 2], {}, True, id="rf3: no follower could be asked"),
    pytest.param([0, 1, 2], {1: Contact(4, True, 3.0)}, False, id="rf3: the bound itself vouches"),
    pytest.param([0, 1, 2], {1: Contact(5, True, 0.1)}, True,
                 id="rf3: following another epoch vouches for nothing"),
    pytest.param([0, 1, 2], {1: Contact(3, True, 0.1)}, True, id="rf3: an older epoch neither"),
    pytest.param([0, 1, 2], {1: Contact(4, False, 0.1)}, True,
                 id="rf3: fenced or leading: not following"),
    pytest.param([0, 1, 2], {0: ON, 7: ON}, True, id="rf3: the leader's and non-members' ignored"),
    pytest.param([0, 1], {1: ON}, False, id="rf2: the follower in contact"),
    pytest.param([0, 1], {1: LINK_DOWN}, True, id="rf2: the follower lost it"),
    pytest.param([0, 1, 2, 3, 4], {1: ON, 2: ON}, False, id="rf5: two of four: a quorum of 3"),
    pytest.param([0, 1, 2, 3, 4], {1: ON, 2: SILENT, 3: LINK_DOWN}, True,
                 id="rf5: three of four lost it"),
    pytest.param([0, 1, 2, 3], {1: ON, 2: ON, 3: None}, False, id="rf4: two of three vouch"),
    pytest.param([0, 1, 2, 3], {1: ON, 2: LINK_DOWN, 3: None}, True, id="rf4: one of three"),
]


@pytest.mark.parametrize(("members", "reports", "expected"), TABLE)
def test_leader_lost(members: list[int], reports: dict[int, Contact | None],
                     expected: bool) -> None:
    assert leader_lost(4, 0, members, reports, T) is expected
