"""The values every decision shares: a member's tail, an ack, the quorum of a member set."""

from __future__ import annotations

from dataclasses import dataclass

#: A member reference meaning "no leader", as Metadata reports it (RabbitMQ's -1 as a u16).
NO_LEADER = 0xFFFF
#: A chunk id meaning "no chunk": an empty log's tail, a commit point before anything commits.
NO_CHUNK = -1


def quorum(n: int) -> int:
    """The majority of ``n`` members: 1 of 1, 2 of 2, 2 of 3, 3 of 4, 3 of 5."""
    if n < 1:
        raise ValueError(f"a member set of {n} has no quorum")
    return n // 2 + 1


@dataclass(frozen=True, slots=True)
class Tail:
    """The end of a member's log: the epoch and id of its last chunk, and the next offset.

    Logs are compared by :meth:`key`, ``(epoch, chunk id)``, and never by offset: an offset
    compared before the epoch picks a member whose chunks a later epoch replaced (RabbitMQ's
    machine version 0 compared ``(offset, epoch)``, fixed in rabbitmq-server PR #3967).
    """

    epoch: int
    chunk_id: int
    next_offset: int

    def key(self) -> tuple[int, int]:
        return (self.epoch, self.chunk_id)


#: The tail of an empty log: below every written one.
EMPTY_TAIL = Tail(0, NO_CHUNK, 0)


@dataclass(frozen=True, slots=True)
class EpochAck:
    """A replica's ack: the last chunk it wrote, tagged with the epoch it was written in."""

    member: int
    epoch: int
    chunk_id: int
