"""A member's replication state, persisted in ``<stream dir>/replication.json`` before any
answer that depends on it (Fence, Assign): its epoch never goes back, as Raft's currentTerm.

A restarted broker comes back fenced for every replicated stream: it neither takes publishes nor
acks a leader until the placement driver assigns it a role in an epoch at least as high.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass
from pathlib import Path

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
        ValueError when the file is not a member state."""
        path = directory / FILE
        if not path.is_file():
            return None
        doc = json.loads(path.read_text())
        epoch, leader, members = doc.get("epoch"), doc.get("leader"), doc.get("members", [])
        if not isinstance(epoch, int) or epoch < 1 or not isinstance(members, list):
            raise ValueError(f"{path}: not a replication state")
        address = None if leader is None else (str(leader[0]), int(leader[1]))
        role = Role(doc.get("role", Role.FENCED.value))
        return cls(epoch, role, address, tuple(int(m) for m in members))
