"""A member's replication state, persisted in ``<stream dir>/replication.json`` before any
answer that depends on it (Fence, Assign): its epoch never goes back, as Raft's currentTerm.

A restarted broker comes back fenced for every replicated stream: it neither takes publishes nor
acks a leader until the placement driver assigns it a role in an epoch at least as high. What is
saved was checked first (members.py, streamlet.replication.requests); a file that cannot be read
back (``load`` raises ValueError) sets its stream aside at start, it never stops the broker.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from ..directory import Address

FILE = "replication.json"


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    FENCED = "fenced"  # after a Fence or a restart: no writes, no acks, reads of committed data


@dataclass(frozen=True)
class MemberState:
    epoch: int
    role: Role
    leader: Address | None = None
    members: tuple[int, ...] = ()

    def save(self, directory: Path) -> None:
        """Write, fsync, rename: on disk before the answer that promises it."""
        doc = {"epoch": self.epoch, "role": self.role.value, "members": list(self.members),
               "leader": None if self.leader is None else list(self.leader)}
        tmp = directory / (FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, json.dumps(doc).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, directory / FILE)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)  # the rename itself
        finally:
            os.close(dfd)

    @classmethod
    def load(cls, directory: Path) -> MemberState | None:
        """The stored state (its role as stored), None for an unreplicated stream. Raises
        ValueError (why, the path named) when the file cannot be read or is not a member
        state: the caller sets the stream aside, it never stops the broker."""
        path = directory / FILE
        if not path.is_file():
            return None
        try:
            return parse(json.loads(path.read_bytes()))
        except (OSError, ValueError) as e:  # JSON and UTF-8 errors are ValueErrors
            raise ValueError(f"{path}: not a replication state ({e})") from e


def parse(doc: object) -> MemberState:
    """A member state from its JSON document; ValueError says what is wrong with it."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    epoch, leader, members = doc.get("epoch"), doc.get("leader"), doc.get("members", [])
    if not _integer(epoch) or epoch < 1:
        raise ValueError(f"epoch {epoch!r}: an integer from 1")
    if not isinstance(members, list) or not all(_integer(m) and m >= 0 for m in members):
        raise ValueError(f"members {members!r}: a list of member ids")
    address = None
    if leader is not None:
        if not (isinstance(leader, list) and len(leader) == 2 and isinstance(leader[0], str)
                and _integer(leader[1]) and 0 < leader[1] < 65536):
            raise ValueError(f"leader {leader!r}: [host, port] or null")
        address = (leader[0], leader[1])
    try:
        role = Role(doc.get("role", Role.FENCED.value))
    except ValueError:
        raise ValueError(f"role {doc.get('role')!r}: one of leader, follower, fenced") from None
    return MemberState(epoch, role, address, tuple(members))


def _integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
