"""An election as pure steps: the operator fences the members with the new epoch, gives this
module their answers, and executes the decision (Assign to the winner and the followers).

The winner is the fenced member with the highest ``(tail epoch, tail chunk id)``: with a
majority fenced, every committed chunk is on one of them (a commit needs a majority of the
epoch's members, and the epoch-start guard of :mod:`.commit` keeps a later epoch's chunks
from being outvoted), so the highest tail holds them all. Ties (equal tails) go, in order, to
the preferred member, a member in sync, one not on a draining pod, the one leading the fewest
streams, then the lowest ordinal. A member below the highest tail is never elected, whatever
it is preferred for.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import Enum

from .model import NO_LEADER, Tail, quorum

__all__ = ["Decision", "Phase", "Reason", "elect", "quorum", "transfer", "transfer_ready"]


class Phase(Enum):
    """The Stream's replication phase the decision leads to (``status.replication.phase``)."""

    ELECTING = "Electing"  # a leader is chosen; Ready once its epoch-start chunk commits
    UNAVAILABLE = "Unavailable"  # no leader: Metadata reports 0xFFFF


class Reason(Enum):
    ELECTED = "Elected"  # the highest tail among a fenced majority
    TRANSFERRED = "Transferred"  # a planned transfer: the target had the highest tail
    TRANSFER_TARGET_BEHIND = "TransferTargetBehind"  # transfer asked, the target lags: the highest tail elected
    NO_QUORUM = "NoQuorum"  # fewer than a majority fenced, not forced
    NO_SURVIVOR = "NoSurvivor"  # forced, and no member answered at all
    UNCLEAN = "UncleanElection"  # forced without a fenced majority: committed data may be lost


@dataclass(frozen=True, slots=True)
class Decision:
    """What to record and execute. ``epoch`` is the epoch the members were fenced with
    (current + 1), kept even when no leader is elected: it was reserved and persisted by the
    fenced members, so a retry fences again with it (or a higher one)."""

    epoch: int
    leader: int  # NO_LEADER when none
    followers: tuple[int, ...]
    phase: Phase
    reason: Reason
    #: elected without a fenced majority (only when forced): callers raise a Warning Event and
    #: the UncleanElection condition
    unclean: bool = False
    #: the winner's tail (None when no leader)
    tail: Tail | None = None
    #: the members that answered the fence, ascending
    fenced: tuple[int, ...] = ()


def _tie_break(
    member: int,
    preferred: int | None,
    in_sync: Collection[int],
    draining: Collection[int],
    leading: Mapping[int, int],
) -> tuple[bool, bool, bool, int, int]:
    """Sort key, smallest first, among members tied on the highest tail."""
    return (
        member != preferred,
        member not in in_sync,
        member in draining,
        leading.get(member, 0),
        member,
    )


def elect(
    members: Collection[int],
    current_epoch: int,
    answers: Mapping[int, Tail | None],
    *,
    preferred: int | None = None,
    in_sync: Collection[int] = (),
    draining: Collection[int] = (),
    leading: Mapping[int, int] | None = None,
    force: bool = False,
) -> Decision:
    """Decide an election of ``members`` after fencing them with epoch ``current_epoch + 1``.

    ``answers`` maps a member to its fence answer (its tail) or None (no answer, or a refused
    fence); answers of non-members are ignored. ``in_sync``, ``draining`` and ``leading``
    (streams each member's pod leads) only break ties. Without a majority fenced there is no
    election (phase Unavailable), unless ``force``: then the highest tail among the members
    that answered wins, and the decision is flagged ``unclean``.
    """
    voters = sorted(set(members))
    if not voters:
        raise ValueError("a stream with no members cannot elect")
    new_epoch = current_epoch + 1
    fenced = {m: t for m, t in answers.items() if m in voters and t is not None}
    order = tuple(sorted(fenced))
    unclean = False
    if len(fenced) < quorum(len(voters)):
        if not force or not fenced:
            reason = Reason.NO_SURVIVOR if force else Reason.NO_QUORUM
            return Decision(new_epoch, NO_LEADER, (), Phase.UNAVAILABLE, reason, fenced=order)
        unclean = True
    best = max(t.key() for t in fenced.values())
    tied = [m for m, t in fenced.items() if t.key() == best]
    counts = leading or {}
    winner = min(tied, key=lambda m: _tie_break(m, preferred, in_sync, draining, counts))
    return Decision(
        new_epoch,
        winner,
        tuple(m for m in voters if m != winner),
        Phase.ELECTING,
        Reason.UNCLEAN if unclean else Reason.ELECTED,
        unclean=unclean,
        tail=fenced[winner],
        fenced=order,
    )


def transfer_ready(leader_tail: Tail, target_tail: Tail | None) -> bool:
    """A planned transfer may fence once the sealed leader's target holds exactly its tail."""
    return target_tail is not None and target_tail == leader_tail


def transfer(
    members: Collection[int],
    current_epoch: int,
    target: int,
    answers: Mapping[int, Tail | None],
    *,
    in_sync: Collection[int] = (),
    draining: Collection[int] = (),
    leading: Mapping[int, int] | None = None,
) -> Decision:
    """A planned leadership transfer to ``target`` (roll, drain, move), after the leader was
    sealed, :func:`transfer_ready` held and the members were fenced: the election of
    :func:`elect` with ``target`` preferred. The target wins only if it has the highest tail
    (reason Transferred); if it fell behind, the highest tail wins as in any election (reason
    TransferTargetBehind), since the fenced stream needs a leader either way. Never unclean.
    """
    if target not in set(members):
        raise ValueError(f"transfer target {target} is not a member")
    d = elect(members, current_epoch, answers, preferred=target, in_sync=in_sync,
              draining=draining, leading=leading)
    if d.leader == NO_LEADER:
        return d
    reason = Reason.TRANSFERRED if d.leader == target else Reason.TRANSFER_TARGET_BEHIND
    return replace(d, reason=reason)
