"""The commit rule: which chunk a majority of the epoch's members hold, counted from the chunk
that opened the leader's epoch (Raft's rule for entries of earlier terms, its figure 8)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from .model import NO_CHUNK, EpochAck, quorum


def majority_tail(
    epoch: int, leader: int, leader_tail: int, acks: Iterable[EpochAck], members: Collection[int]
) -> int:
    """The highest chunk id that a majority of ``members`` hold, by what they acked in ``epoch``.

    The leader's own tail is its ack. Each other member counts with its latest ack tagged with
    ``epoch`` (the highest, if several are given), capped at the leader's tail; a member
    without one counts as holding nothing. Acks of another epoch, and acks of non-members, are
    ignored. The tails sorted highest first, the one at index ``n // 2`` (n members) is held
    by ``n // 2 + 1`` of them: a majority. :data:`NO_CHUNK` when no majority holds anything.
    """
    voters = set(members)
    if leader not in voters:
        raise ValueError(f"leader {leader} is not a member of {sorted(voters)}")
    held = dict.fromkeys(voters, NO_CHUNK)
    held[leader] = leader_tail
    for ack in acks:
        if ack.epoch == epoch and ack.member in voters and ack.member != leader:
            held[ack.member] = max(held[ack.member], min(ack.chunk_id, leader_tail))
    tails = sorted(held.values(), reverse=True)
    return tails[quorum(len(tails)) - 1]  # == tails[n // 2]


def committed(
    epoch: int,
    leader: int,
    leader_tail: int,
    acks: Iterable[EpochAck],
    members: Collection[int],
    epoch_start: int | None,
    previous: int = NO_CHUNK,
) -> int:
    """The commit point (a chunk id, :data:`NO_CHUNK` for none) of a leader in ``epoch``.

    ``epoch_start`` is the id of the first chunk the leader wrote in its epoch (None until it
    is written); ``previous`` the commit point known so far (from the last leader's Commit, or
    this function's last answer). The majority's tail (:func:`majority_tail`) becomes the
    commit point only once it reaches ``epoch_start``: until then a majority holding
    an earlier epoch's chunk proves nothing, since a member holding another chunk of a later
    epoch at that place may still win an election and truncate it (Raft §5.4.2, figure 8).
    Before that the commit point stays at ``previous``. It never goes down.

    A single member (RF=1) needs no guard, no other log can be elected over it: its commit
    point is its tail.
    """
    majority = majority_tail(epoch, leader, leader_tail, acks, members)
    if len(set(members)) > 1 and (epoch_start is None or majority < epoch_start):
        return previous
    return max(previous, majority)
