"""The replicated streams this broker is a member of, and what the placement driver and the
followers' links ask of them: Fence, Assign, ReplicaHello, ReplicaStart, ReplicaAck.

Every answer that promises an epoch is given after ``MemberState.save``, nothing is saved before
the request was checked (``Invalid``), and a member never takes an epoch lower than its own.
The leader takes publishes; a follower's and a fenced member's stream is sealed; readers see
committed data only. Two leaders claimed for one epoch are logged and counted (``TwoLeaders``).
Roles and their rules: docs/replication.md#the-data-path-brokerreplication.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from ...core.registry import Streams
from ...core.streams import Stream
from ...replication.readiness import MemberView
from ...replication.requests import (
    NO_CLUSTER,
    EpochLeader,
    assign_refusal,
    fence_refusal,
    named_peer,
    peer_index,
    two_leaders,
)
from ..directory import Address, Placement
from .follower import Follower
from .leader import Feed, FollowerConnection, Leader
from .member import MemberState, Role
from .peer import PeerLogin
from .sac import ReplicatedSac

log = logging.getLogger("streamlet.broker")

#: A leader sealed for a transfer takes publishes again after this long if nothing happened.
SEAL_LEASE_S = 30.0


class Refused(Exception):
    """Not done: ``epoch`` is the member's own (higher than asked, or not the leader's)."""

    def __init__(self, why: str, epoch: int) -> None:
        super().__init__(why)
        self.epoch = epoch


class Invalid(Exception):
    """A request no member takes (an epoch 0, a leader that is no peer, a broker in no
    cluster): refused before anything is saved."""


@dataclass
class TwoLeaders:
    """What a member saw of two leaders in one epoch: the last time (the epoch, the leader it
    knew, the one claimed, by what) and how many times."""

    epoch: int
    known: int
    claimed: int
    source: str
    count: int = 1


@dataclass(frozen=True)
class TailReport:
    """What a fenced member answers: its epoch now, its tail and its epoch vector."""

    epoch: int
    tail: tuple[int, int, int]
    epochs: list[tuple[int, int]]


class Member:
    """This broker's part in one replicated stream."""

    def __init__(self, stream: Stream, state: MemberState) -> None:
        self.stream = stream
        self.state = state
        self.leader: Leader | None = None
        self.follower: Follower | None = None
        #: the leader this member was told of last, in that epoch (kept through a Fence of the
        #: same epoch and a restart): what a claim about the epoch's leader is checked against
        self.led_by: EpochLeader | None = None
        #: two leaders seen in one epoch (None: never)
        self.two_leaders: TwoLeaders | None = None
        #: for /metrics: epochs this broker was assigned to lead (the last: ``led``), and
        #: Assigns that changed the member set
        self.elections = 0
        self.led = 0
        self.membership_changes = 0
        #: when (time.monotonic) the member took its role: a fenced one waits for it from then
        self.since = time.monotonic()

    def view(self, me: int | None) -> MemberView:
        """What readiness (streamlet.replication.readiness) needs of this member."""
        state, follower = self.state, self.follower
        learner = me is not None and bool(state.members) and me not in state.members
        if state.role is Role.FOLLOWER and follower is not None:
            return MemberView(self.stream.name, state.role.value, learner,
                              follower.contact_age(), follower.silence(), follower.caught_up())
        return MemberView(self.stream.name, state.role.value, learner,
                          waiting_s=time.monotonic() - self.since)

    def counted(self, before: tuple[int, ...], state: MemberState) -> None:
        """Count an Assign taken (``before``: the member set it replaced, () if none)."""
        if state.role is Role.LEADER and state.epoch > self.led:
            self.elections += 1
            self.led = state.epoch
        if before and sorted(before) != sorted(state.members):
            self.membership_changes += 1

    def report(self) -> TailReport:
        lg = self.stream.log
        return TailReport(self.state.epoch, lg.tail(), lg.epoch_vector())

    def halt(self) -> None:
        if self.leader is not None:
            self.leader.stop()
            self.leader = None
        if self.follower is not None:
            self.follower.stop()
            self.follower = None


class Members:
    """Every member this broker holds, by stream. ``me``: this broker's member id;
    ``credentials``: what its followers' links log in to leaders with; ``peers``: every
    member's address, by id."""

    def __init__(self, me: int | None, credentials: PeerLogin,
                 peers: tuple[Address, ...] = ()) -> None:
        self.me = me
        self.peers = peers
        self.credentials = credentials
        self.members: dict[Stream, Member] = {}
        self._stored: dict[Stream, MemberState] = {}  # as stored, for resume
        #: single-active-consumer groups, decided at each stream's leader
        self.sac = ReplicatedSac(credentials)

    @property
    def in_cluster(self) -> bool:
        """Whether this broker has cluster peers (and a member id): else it is no member of
        any replicated stream and refuses every driver request."""
        return bool(self.peers) and self.me is not None

    def load(self, streams: Streams) -> None:
        """At start: every stream with a stored member state is a member again, fenced: it
        waits for an Assign (or ``resume``). A state that cannot be read sets its stream
        aside (logged, not served): the other streams start."""
        for stream in list(streams.streams.values()):
            try:
                stored = MemberState.load(stream.directory)
            except ValueError as e:
                streams.set_aside(stream.directory, str(e), stream)
                continue
            if stored is None:
                continue
            self._fence_stream(stream)
            # Readers wait for a leader's commit: what this log holds past it may be truncated.
            stream.commit_end = stream.log.first_offset
            member = self.members[stream] = Member(stream, replace(stored, role=Role.FENCED))
            if stored.role is not Role.FENCED:
                member.led_by = self._led_by(stored)
            self._stored[stream] = stored
            log.info("stream %s: a replica in epoch %d, fenced until assigned", stream.name,
                     stored.epoch)

    def resume(self) -> None:
        """Without a placement driver (cluster.resume_roles): every member takes up the role
        it stored, in the same epoch. An epoch has one leader, assigned once, so this makes
        no second one; under a driver that elected meanwhile, the epochs keep the old role
        from committing anything until the driver fences it (which is why it is off then)."""
        for stream, stored in list(self._stored.items()):
            if stored.role is Role.FENCED or self.members.get(stream) is None:
                continue
            leader = stored.leader
            if stored.role is Role.LEADER:
                leader = self.peers[self.me] if self.me is not None and self.me < len(
                    self.peers) else stored.leader
            try:
                if leader is None:
                    raise Invalid("no leader stored")
                self.assign(stream, stored.epoch, stored.role, leader, stored.members)
            except (Refused, Invalid) as e:
                log.warning("stream %s: cannot resume as %s: %s", stream.name,
                            stored.role.value, e)
            else:
                log.info("stream %s: resumed as %s in epoch %d", stream.name, stored.role.value,
                         stored.epoch)
        self._stored.clear()

    def get(self, stream: Stream) -> Member | None:
        return self.members.get(stream)

    def leader_of(self, stream: Stream) -> Address | None:
        """Where requests only a leader answers go: None when this broker answers them (the
        stream is not replicated, or this member leads); raises Refused while fenced (no
        leader known: clients retry on 6)."""
        member = self.members.get(stream)
        if member is None or member.state.role is Role.LEADER:
            return None
        if member.state.role is Role.FENCED or member.state.leader is None:
            raise Refused("fenced: no leader known", member.state.epoch)
        return member.state.leader

    def placement(self, stream: Stream, here: Address) -> Placement | None:
        """Where this member says the stream lives (Metadata's answer until the directory has
        an entry): its leader (None while fenced: being elected) and the other members, by
        ``cluster.peers``. None for a stream that is not replicated."""
        member = self.members.get(stream)
        if member is None:
            return None
        state = member.state
        leader = {Role.LEADER: here, Role.FOLLOWER: state.leader, Role.FENCED: None}[state.role]
        leader_id = self.me if state.role is Role.LEADER else None
        others = tuple(self.peers[m] for m in state.members if m < len(self.peers)
                       and m != leader_id and self.peers[m] != leader)
        return Placement(state.epoch, leader, others)

    def contact(self, stream: Stream) -> tuple[int, Role, float | None] | None:
        """The member's epoch and role, and how long ago (seconds) its link last heard from the
        leader (None: not following, or the link is down); None when not replicated."""
        member = self.members.get(stream)
        if member is None:
            return None
        follower = member.follower
        return (member.state.epoch, member.state.role,
                None if follower is None else follower.contact_age())

    def views(self) -> list[MemberView]:
        """Every member's part in this broker's readiness."""
        return [m.view(self.me) for m in self.members.values()]

    def seal(self, stream: Stream, epoch: int, on: bool) -> tuple[int, int, int]:
        """As the leader of ``epoch``: stop taking publishes (``on``) for a planned transfer, the
        feeds and the commit going on, so the target catches up with a log that no longer
        grows; or take them again. The seal is a lease: it ends by itself after SEAL_LEASE_S
        unless the member was fenced or reassigned meanwhile (a driver that died mid-transfer
        leaves no stream unwritable). Answers the tail, everything taken written."""
        member = self._leading(stream, epoch)
        leader = member.leader
        if on:
            if not stream.sealed:  # what is pending is written first (and confirmed once
                # committed, not forgotten as a fence forgets it); publishers are told 6
                for conn in {p.conn for p in stream.seal()}:
                    conn.stream_moved(stream)

            def expire() -> None:
                if member.leader is leader and stream.sealed:
                    log.warning("stream %s: sealed for a transfer that did not happen: "
                                "publishes taken again", stream.name)
                    stream.sealed = False
            stream.clock.call_later(SEAL_LEASE_S, expire)
            log.info("stream %s: sealed in epoch %d for a transfer", stream.name, epoch)
        else:
            stream.sealed = False
        return stream.log.tail()

    def forget(self, stream: Stream) -> None:
        member = self.members.pop(stream, None)
        if member is not None:
            member.halt()
        self.sac.changed(stream, None)

    def _fence_stream(self, stream: Stream) -> None:
        """No more publishes here: its publishers are told (MetadataUpdate 6) and look the
        leader up again. Its consumers are not: they read committed data, which stays."""
        stream.awaits_commit = True
        stream.forget_unconfirmed()
        if not stream.sealed:
            for conn in {p.conn for p in stream.seal()}:
                conn.stream_moved(stream)

    def fence(self, stream: Stream, epoch: int) -> TailReport:
        why = fence_refusal(epoch, self.peers if self.me is not None else ())
        if why is not None:
            log.warning("stream %s: Fence in epoch %d refused: %s", stream.name, epoch, why)
            raise Invalid(why)
        member = self.members.get(stream)
        if member is not None and epoch < member.state.epoch:
            raise Refused(f"fence in epoch {epoch}: the member is in {member.state.epoch}",
                          member.state.epoch)
        self._fence_stream(stream)
        if member is None:
            member = self.members[stream] = Member(stream, MemberState(epoch, Role.FENCED))
        member.halt()
        if member.state.role is not Role.FENCED:
            member.since = time.monotonic()
        member.state = MemberState(epoch, Role.FENCED, member.state.leader, member.state.members)
        member.state.save(stream.directory)
        self.sac.changed(stream, member.state)
        log.info("stream %s: fenced in epoch %d", stream.name, epoch)
        return member.report()

    def assign(self, stream: Stream, epoch: int, role: Role, leader: Address,
               members: tuple[int, ...]) -> None:
        """Take ``role`` in ``epoch``; ``leader``: the leader's address as its followers reach
        it (a peer's; this member's own when it leads)."""
        why = (assign_refusal(epoch, role is Role.LEADER, leader, members, self.peers, self.me)
               if role is not Role.FENCED else "an Assign gives a role: leader or follower")
        if why is not None or self.me is None:
            log.warning("stream %s: Assign as %s in epoch %d (leader %s:%d, members %s) "
                        "refused: %s", stream.name, role.value, epoch, *leader, list(members),
                        why or NO_CLUSTER)
            raise Invalid(why or NO_CLUSTER)
        member = self.members.get(stream)
        if member is not None and epoch < member.state.epoch:
            raise Refused(f"assign in epoch {epoch}: the member is in {member.state.epoch}",
                          member.state.epoch)
        index = named_peer(self.peers, leader)
        assert index is not None  # assign_refusal checked it
        leader = self.peers[index]  # as configured: where a link goes, what claims are compared with
        claimed = EpochLeader(epoch, index)
        if member is not None:
            self.saw_leader(member, claimed, "Assign")
        state = MemberState(epoch, role, leader, members)
        if member is not None and member.state == state and (member.leader or member.follower):
            return  # the same assignment again (a driver re-driving its step)
        if not (role is Role.LEADER and member is not None and member.leader is not None):
            self._fence_stream(stream)  # a leader kept in a new epoch keeps its publishers
        before = () if member is None else member.state.members
        if member is None:
            member = self.members[stream] = Member(stream, state)
        member.halt()
        member.state = state
        member.since = time.monotonic()
        member.counted(before, state)
        member.led_by = claimed
        state.save(stream.directory)
        self.sac.changed(stream, state)
        if role is Role.LEADER:
            member.leader = Leader(stream, epoch, self.me, members)
            stream.sealed = False
            member.leader.start()
            log.info("stream %s: leader in epoch %d of members %s", stream.name, epoch, members)
        elif role is Role.FOLLOWER:
            assert leader is not None
            member.follower = Follower(stream, epoch, self.me, leader, self.credentials)
            member.follower.start()
            log.info("stream %s: follower of %s:%d in epoch %d", stream.name, *leader, epoch)

    def hello(self, stream: Stream, epoch: int, member_id: int) -> TailReport:
        """A follower's link asks to follow: only this epoch's leader, only a peer (a member,
        or a learner: a peer outside the member set being added, fed but not counted)."""
        self.claimed_here(stream, epoch, f"ReplicaHello from member {member_id}")
        member = self._leading(stream, epoch)
        if not 0 <= member_id < len(self.peers) or member_id == self.me:
            raise Refused(f"member {member_id} is no peer of this broker", epoch)
        return member.report()

    def learner(self, stream: Stream, epoch: int, member_id: int) -> tuple[Address, tuple[int, ...]]:
        """As the leader of ``epoch``: may ``member_id`` become a learner? Answers where its
        link will reach this leader and the member set it is told; raises Invalid (not a peer,
        already a member) or Refused (not this epoch's leader)."""
        member = self._leading(stream, epoch)
        if not 0 <= member_id < len(self.peers):
            raise Invalid(f"member {member_id}: not among the {len(self.peers)} cluster.peers")
        if member_id in member.state.members:
            raise Invalid(f"member {member_id} is already a member in epoch {epoch}")
        assert self.me is not None
        return self.peers[self.me], member.state.members

    def leave(self, stream: Stream, epoch: int) -> None:
        """May this broker drop its copy of ``stream``, no member of ``epoch``'s set? Refused
        when it leads, or is a member of ``epoch`` or of a later epoch (added again); Invalid
        when the stream is not replicated here."""
        member = self.members.get(stream)
        if member is None:
            raise Invalid("not a replicated stream here")
        state = member.state
        if member.leader is not None or state.role is Role.LEADER:
            raise Refused(f"this member leads epoch {state.epoch}", state.epoch)
        if state.epoch > epoch or (state.epoch == epoch and self.me in state.members):
            raise Refused(f"a member in epoch {state.epoch}", state.epoch)

    def start(self, stream: Stream, epoch: int, member_id: int, tail: tuple[int, int, int],
              conn: FollowerConnection) -> Feed:
        """The follower truncated to our log: feed it from its next offset, after checking its
        tail is in our log (Osiris' init_data_reader)."""
        member = self._leading(stream, epoch)
        assert member.leader is not None
        tail_epoch, tail_id, next_offset = tail
        if tail_id >= 0 and not _holds(stream, tail_epoch, tail_id):
            raise Refused(f"member {member_id}'s tail ({tail_epoch}, {tail_id}) is not in the "
                          "leader's log", epoch)
        return member.leader.attach(member_id, conn, next_offset)

    def leads(self, stream: Stream, epoch: int) -> bool:
        member = self.members.get(stream)
        return member is not None and member.leader is not None and member.state.epoch == epoch

    # --- two leaders in one epoch ------------------------------------------------------------

    def _led_by(self, state: MemberState) -> EpochLeader:
        if state.role is Role.LEADER:
            return EpochLeader(state.epoch, self.me)
        return EpochLeader(state.epoch, None if state.leader is None
                           else peer_index(self.peers, state.leader))

    def claimed_here(self, stream: Stream, epoch: int, source: str) -> None:
        """A member's link (ReplicaHello, SacJoin) says this broker leads ``epoch``."""
        member = self.members.get(stream)
        if member is not None and self.me is not None:
            self.saw_leader(member, EpochLeader(epoch, self.me), source)

    def saw_leader(self, member: Member, claimed: EpochLeader, source: str) -> None:
        """Check ``claimed`` against the leader this member knows for that epoch; two leaders
        are logged, counted (``streamlet_replication_split_brain_total``) and shown in the
        stream's status (the management API's queue object, ``split_brain``)."""
        known = member.led_by
        if known is None or not two_leaders(known, claimed):
            return
        assert known.leader is not None and claimed.leader is not None
        seen = member.two_leaders
        member.two_leaders = TwoLeaders(claimed.epoch, known.leader, claimed.leader, source,
                                        1 if seen is None else seen.count + 1)
        log.error("stream %s: two leaders in epoch %d: member %d as this member knows, member "
                  "%d by %s (a split brain: two drivers, or an epoch elected twice)",
                  member.stream.name, claimed.epoch, known.leader, claimed.leader, source)

    def _leading(self, stream: Stream, epoch: int) -> Member:
        member = self.members.get(stream)
        if member is None or member.leader is None or member.state.epoch != epoch:
            mine = member.state.epoch if member is not None else 0
            raise Refused(f"not the leader of epoch {epoch}", mine)
        return member

    def close(self) -> None:
        for member in self.members.values():
            member.halt()
        self.sac.close()


def _holds(stream: Stream, epoch: int, chunk_id: int) -> bool:
    """Whether the log holds chunk ``chunk_id`` written in ``epoch`` (the epoch vector says:
    chunks of one epoch are contiguous, so the chunk is there when it lies in that epoch's run)."""
    start = -1
    for e, last in stream.log.epoch_vector():
        if e == epoch:
            return start < chunk_id <= last
        start = last
    return False
