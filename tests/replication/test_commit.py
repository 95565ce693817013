"""The commit rule as a table (T5 of the replication notes), Raft's figure 8 included."""

from __future__ import annotations

import pytest

from streamlet.replication import NO_CHUNK, EpochAck, Tail
from streamlet.replication.commit import committed, majority_tail
from streamlet.replication.election import elect


def acks(epoch: int, **tails: int) -> list[EpochAck]:
    """acks(4, m1=7, m2=3): member 1 acked chunk 7 in epoch 4, member 2 chunk 3."""
    return [EpochAck(int(k[1:]), epoch, v) for k, v in tails.items()]


# (members, leader tail, acks, epoch start, previous, expected); epoch 4, leader 0
TABLE = [
    pytest.param({0}, 10, [], None, NO_CHUNK, 10, id="rf1: commit = tail, no guard"),
    pytest.param({0}, NO_CHUNK, [], None, NO_CHUNK, NO_CHUNK, id="rf1: empty log"),
    pytest.param({0}, 10, [], 10, 4, 10, id="rf1: from an earlier commit"),
    pytest.param({0, 1}, 10, [], 0, NO_CHUNK, NO_CHUNK, id="rf2: the leader alone is not a majority"),
    pytest.param({0, 1}, 10, acks(4, m1=7), 0, NO_CHUNK, 7, id="rf2: needs both"),
    pytest.param({0, 1, 2}, 10, [], 0, NO_CHUNK, NO_CHUNK, id="rf3: no ack yet"),
    pytest.param({0, 1, 2}, 10, acks(4, m1=10), 0, NO_CHUNK, 10, id="rf3: leader and one replica"),
    pytest.param({0, 1, 2}, 10, acks(4, m1=7, m2=3), 0, NO_CHUNK, 7, id="rf3: the 2nd highest"),
    pytest.param({0, 1, 2}, 10, acks(3, m1=10, m2=10), 0, NO_CHUNK, NO_CHUNK,
                 id="rf3: stale acks of the last epoch ignored"),
    pytest.param({0, 1, 2}, 10, acks(5, m1=10), 0, NO_CHUNK, NO_CHUNK,
                 id="rf3: acks of a later epoch ignored"),
    pytest.param({0, 1, 2}, 10, acks(4, m7=10, m8=10), 0, NO_CHUNK, NO_CHUNK,
                 id="rf3: non-members ignored"),
    pytest.param({0, 1, 2}, 10, acks(4, m1=99), 0, NO_CHUNK, 10,
                 id="rf3: an ack beyond the leader's tail counts as the tail"),
    pytest.param({0, 1, 2}, 10, acks(4, m1=3) + acks(4, m1=8), 0, NO_CHUNK, 8,
                 id="rf3: a member's highest ack"),
    pytest.param({0, 1, 2}, 10, acks(4, m1=6), 0, 8, 8, id="rf3: never goes down"),
    pytest.param({0, 1, 2, 3}, 10, acks(4, m1=9, m2=8, m3=2), 0, NO_CHUNK, 8,
                 id="rf4: three of four"),
    pytest.param({0, 1, 2, 3, 4}, 10, acks(4, m1=8, m2=6), 0, NO_CHUNK, 6,
                 id="rf5: three of five"),
    pytest.param({0, 1, 2, 3, 4}, 10, acks(4, m1=8), 0, NO_CHUNK, NO_CHUNK,
                 id="rf5: two of five is not a majority"),
    pytest.param({0, 1, 2, 3, 4}, 10, acks(4, m1=10, m2=10, m3=10, m4=10), 0, NO_CHUNK, 10,
                 id="rf5: all"),
    pytest.param({0, 1, 2}, 10, acks(4, m1=10), None, 5, 5,
                 id="rf3: epoch-start chunk not written yet: stays"),
    pytest.param({0, 1, 2}, 10, acks(4, m1=8), 9, 5, 5,
                 id="rf3: majority below the epoch-start chunk: stays"),
    pytest.param({0, 1, 2}, 10, acks(4, m1=9), 9, 5, 9,
                 id="rf3: the epoch-start chunk commits, and everything below it"),
]


@pytest.mark.parametrize(("members", "tail", "acked", "start", "previous", "expected"), TABLE)
def test_commit_table(members: set[int], tail: int, acked: list[EpochAck], start: int | None,
                      previous: int, expected: int) -> None:
    assert committed(4, 0, tail, acked, members, start, previous) == expected


def test_the_leader_must_be_a_member() -> None:
    with pytest.raises(ValueError, match="not a member"):
        majority_tail(1, 9, 10, [], {0, 1, 2})


def test_figure_8_an_old_epoch_chunk_on_a_majority_is_not_committed() -> None:
    """Raft's figure 8 with epochs and chunk ids. Members 1-5.

    Epoch 2: leader 1 writes chunk 2 on 1 and 2, then fails. Epoch 3: leader 5 writes another
    chunk 2 (epoch 3) on 5 only, then fails. Epoch 4: leader 1 writes its epoch-start chunk 3
    and sends its old chunk 2 to 3: chunk 2 (epoch 2) is on a majority (1, 2, 3), acked in
    epoch 4. Counting it would be wrong: if 1 fails now, members 2-5 elect 5 (its tail (3, 2)
    beats (2, 2)) and 5's chunk 2 replaces it. So nothing moves until chunk 3 is on a majority.
    """
    members = {1, 2, 3, 4, 5}
    before = 1  # chunks 0-1 were committed in epoch 1
    on_majority = acks(4, m2=2, m3=2)
    assert majority_tail(4, 1, 3, on_majority, members) == 2
    assert committed(4, 1, 3, on_majority, members, epoch_start=3, previous=before) == before

    # why: the election that may follow elects member 5 and would lose chunk 2 of epoch 2
    fenced = {2: Tail(2, 2, 30), 3: Tail(2, 2, 30), 4: Tail(1, 1, 20), 5: Tail(3, 2, 25)}
    assert elect(members, 4, fenced).leader == 5

    # once the epoch-start chunk is on a majority, chunks 2 and 3 commit; every majority then
    # holds (4, 3), which beats 5's (3, 2)
    assert committed(4, 1, 3, acks(4, m2=3, m3=3), members, epoch_start=3, previous=before) == 3
    fenced = {2: Tail(4, 3, 31), 3: Tail(4, 3, 31), 4: Tail(1, 1, 20), 5: Tail(3, 2, 25)}
    assert elect(members, 4, fenced).leader in (2, 3)

