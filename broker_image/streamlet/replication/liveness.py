"""Whether a leader the placement driver cannot reach is lost, by its followers' reports.

A driver's probe failing says only that the driver's path to the leader fails. The leader still
does its work while it and the followers in contact with it are a quorum of the members: it
commits with their acks. So it is deposed only when they are not (for 3 members: both followers
lost it; for 5: three of four), as a Kafka controller keeps a leader its in-sync followers still
fetch from. A follower that cannot be asked, follows another epoch or is not following vouches
for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .model import Tail, quorum


@dataclass(frozen=True, slots=True)
class Contact:
    """A member's report: its epoch, whether it follows in it, how long ago (seconds) it last
    heard from its leader (None: its link to the leader is down), and its tail."""

    epoch: int
    following: bool
    age: float | None
    tail: Tail | None = None


def vouches(contact: Contact | None, epoch: int, timeout: float) -> bool:
    """The member follows the leader of ``epoch`` and heard from it within ``timeout``."""
    return (contact is not None and contact.following and contact.epoch == epoch
            and contact.age is not None and contact.age <= timeout)


def leader_lost(epoch: int, leader: int, members: Sequence[int],
                reports: Mapping[int, Contact | None], timeout: float) -> bool:
    """True when ``leader`` and the followers vouching for it in ``epoch`` are fewer than a
    quorum of ``members`` (a member missing from ``reports`` could not be asked)."""
    vouching = sum(vouches(reports.get(m), epoch, timeout) for m in members if m != leader)
    return 1 + vouching < quorum(len(members))
