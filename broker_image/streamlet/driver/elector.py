"""Carrying out elections and member set changes against the member brokers.

The rules are pure (streamlet.replication); this is the I/O around them, shared by the local
cluster's driver (its record a file) and the operator (the Stream's status): reserve the epoch
durably before any member hears of it (False: another driver did, this one stops); an election
fences the members, elects among the fenced, assigns the leader then each follower; a change's
``join`` assigns the next epoch's new member set, the leader kept. ``Members`` speaks to the
brokers (private commands over the RabbitMQ Stream protocol, a connection per request).
Mechanism: docs/replication.md#election-electionpy and #membership-membershippy.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client import connect
from ..rabbitmq import Code
from ..rabbitmq.constants import DRIVER_TOKEN, Role
from ..rabbitmq.frames import replication as rf
from ..replication.election import Decision, elect
from ..replication.liveness import Contact
from ..replication.model import NO_LEADER, Tail, quorum

log = logging.getLogger("streamlet.driver.elector")

#: A request to a member broker must be answered within this many seconds.
REQUEST_TIMEOUT_S = 3.0
#: A ReplicaLearn is answered once the leader made the learner (two requests of its own).
LEARN_TIMEOUT_S = 10.0
#: A probe: a broker must log a client in within this many seconds.
PROBE_TIMEOUT_S = 1.0


class Gone:
    """A Fence answered "no such stream": the member deleted it."""


GONE = Gone()

Address = tuple[str, int]


class Members:
    """Requests to member brokers by member id (``address(member)`` gives host and port;
    ``peer_address(member)``, where followers reach a leader, when that differs: e.g. its TLS
    port when the brokers replicate over TLS); ``tls``: requests over TLS; ``token``: the
    driver's fencing token, sent with each request (None: a driver without a Lease)."""

    def __init__(self, address: Callable[[int], Address],
                 credentials: tuple[str, str] = ("guest", "guest"),
                 connection_name: str = "placement driver",
                 peer_address: Callable[[int], Address] | None = None,
                 tls: ssl.SSLContext | None = None, token: int | None = None) -> None:
        self.address = address
        self.token = token
        self.credentials = credentials
        #: TLS to the members (their certificates must name the host ``address`` gives)
        self.tls = tls
        self.connection_name = connection_name
        self.peer_address = peer_address or address

    async def fence(self, member: int, name: str, epoch: int) -> Tail | Gone | None:
        """The member's tail once fenced with ``epoch``; GONE when it has no such stream; None
        when it did not fence (unreachable, or it holds a higher epoch)."""
        answer = await self.request(member, lambda c: rf.Fence(c, name, epoch))
        if answer is not None and answer.code == Code.STREAM_DOES_NOT_EXIST:
            return GONE
        if answer is None or answer.code != Code.OK:
            return None
        return Tail(answer.tail_epoch, answer.tail_chunk_id, answer.next_offset)

    async def assign(self, member: int, name: str, epoch: int, role: Role, leader: int,
                     members: Sequence[int]) -> bool:
        host, port = self.peer_address(leader)
        answer = await self.request(member, lambda c: rf.Assign(
            c, name, epoch, role, host, port, list(members)))
        ok = answer is not None and answer.code == Code.OK
        if not ok:
            log.info("stream %s: assigning member %d as %s in epoch %d failed (%s)", name,
                     member, role.name.lower(), epoch,
                     "unreachable" if answer is None else f"code {answer.code}")
        return ok

    async def contact(self, member: int, name: str) -> Contact | None:
        """Whether the member follows ``name``'s leader and how long ago it heard from it
        (ReplicaContact); None when it cannot be asked or does not hold the stream."""
        answer = await self.contact_or_refusal(member, name)
        return answer if isinstance(answer, Contact) else None

    async def contact_or_refusal(self, member: int, name: str) -> Contact | int | None:
        """The member's ReplicaContact answer: its Contact, or the code it refused with (2: it
        holds no such stream; 17: it holds it without member state, a stream of one copy);
        None when it cannot be asked."""
        answer = await self.request(member, lambda c: rf.ReplicaContact(c, name))
        if answer is None:
            return None
        if answer.code != Code.OK:
            return int(answer.code)
        return Contact(answer.epoch, answer.role == Role.FOLLOWER,
                       None if answer.age_ms < 0 else answer.age_ms / 1000,
                       Tail(answer.tail_epoch, answer.tail_chunk_id, answer.next_offset))

    async def seal(self, member: int, name: str, epoch: int, on: bool = True) -> Tail | None:
        """Stop the leader of ``epoch`` taking publishes (``on``), or let it take them again:
        its tail then, or None when it is not that epoch's leader or cannot be reached."""
        answer = await self.request(member, lambda c: rf.ReplicaSeal(c, name, epoch, int(on)))
        if answer is None or answer.code != Code.OK:
            return None
        return Tail(answer.tail_epoch, answer.tail_chunk_id, answer.next_offset)

    async def learn(self, leader: int, name: str, epoch: int, member: int) -> bool:
        """Ask the leader of ``epoch`` to make ``member`` a learner (ReplicaLearn): answered
        once the member follows it."""
        answer = await self.request(leader, lambda c: rf.ReplicaLearn(c, name, epoch, member),
                                    timeout=LEARN_TIMEOUT_S)
        ok = answer is not None and answer.code == Code.OK
        if not ok:
            log.info("stream %s: member %d could not become a learner at member %d (%s)", name,
                     member, leader, "unreachable" if answer is None else f"code {answer.code}")
        return ok

    async def leave(self, member: int, name: str, epoch: int) -> bool:
        """Tell a former member to drop its copy (ReplicaLeave): True once it has none."""
        answer = await self.request(member, lambda c: rf.ReplicaLeave(c, name, epoch))
        return answer is not None and answer.code in (Code.OK, Code.STREAM_DOES_NOT_EXIST)

    async def probe(self, member: int) -> bool:
        """Whether the member's broker logs a client in within PROBE_TIMEOUT_S."""
        return await self.request(member, None, probe=True) is not None

    async def request(self, member: int, make: Any, probe: bool = False,
                      timeout: float = REQUEST_TIMEOUT_S) -> Any:
        """The answer of ``member``'s broker, or None when it cannot be reached in time."""
        host, port = self.address(member)
        user, password = self.credentials
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S if probe else timeout):
                client = await connect(host, port, user, password, heartbeat=0, ssl=self.tls,
                                       connection_name=self.connection_name,
                                       properties=None if self.token is None else {
                                           DRIVER_TOKEN: str(self.token)})
                try:
                    if probe:
                        return True
                    answer = await client.request(make, ok=tuple(Code))
                    if answer.code == Code.ACCESS_REFUSED and self.token is not None:
                        log.warning("member %d refused a request with fencing token %d: a newer "
                                    "placement driver holds the lease", member, self.token)
                    return answer
                finally:
                    await client.close()
        except (TimeoutError, OSError, ConnectionError) as e:  # ssl.SSLError is an OSError
            log.debug("member %d unreachable: %s", member, e)
            return None
        except Exception as e:  # a refused login, a closed connection: unreachable for now
            log.info("member %d: %s", member, e)
            return None


@dataclass
class Outcome:
    """What an election did: ``decision`` None when it did not happen (``lost``: another driver
    reserved the epoch first; ``deleted``: a majority no longer has the stream)."""

    epoch: int
    decision: Decision | None = None
    lost: bool = False
    deleted: bool = False
    #: the members that took their role (leader first), for the driver to remember
    assigned: list[int] = field(default_factory=list)

    @property
    def leader(self) -> int:
        if self.decision is None or self.decision.leader == NO_LEADER:
            return NO_LEADER
        return self.decision.leader if self.decision.leader in self.assigned else NO_LEADER


async def run_election(name: str, members: Sequence[int], current_epoch: int,
                       reserve: Callable[[int], Awaitable[bool]], brokers: Members, *,
                       reachable: Collection[int] | None = None,
                       decide: Callable[[dict[int, Tail | None]], Decision] | None = None,
                       ) -> Outcome:
    """Elect a leader for ``name`` in epoch ``current_epoch + 1``.

    ``reachable``: the members worth fencing (None: all); the others count as not answering.
    ``decide``: the rule given the fence answers (default: ``elect`` over ``members``); a planned
    transfer or a forced election passes its own."""
    epoch = current_epoch + 1
    outcome = Outcome(epoch)
    if not await reserve(epoch):
        outcome.lost = True
        return outcome
    answers: dict[int, Tail | None] = {}
    gone = 0
    for m in members:
        answer = (await brokers.fence(m, name, epoch)
                  if reachable is None or m in reachable else None)
        gone += isinstance(answer, Gone)
        answers[m] = answer if isinstance(answer, Tail) else None
    if gone >= quorum(len(members)):
        outcome.deleted = True
        return outcome
    decision = (decide(answers) if decide is not None
                else elect(list(members), current_epoch, answers))
    outcome.decision = decision
    if decision.leader == NO_LEADER:
        log.warning("stream %s: no leader in epoch %d (%s; fenced: %s)", name, epoch,
                    decision.reason.value, list(decision.fenced))
        return outcome
    if not await brokers.assign(decision.leader, name, epoch, Role.LEADER, decision.leader,
                                members):
        return outcome
    outcome.assigned.append(decision.leader)
    for m in decision.followers:
        if (reachable is None or m in reachable) and await brokers.assign(
                m, name, epoch, Role.FOLLOWER, decision.leader, members):
            outcome.assigned.append(m)
    log.info("stream %s: member %d leads epoch %d (%s)", name, decision.leader, epoch,
             decision.reason.value)
    return outcome


async def join(name: str, members: Sequence[int], current_epoch: int, leader: int,
               reserve: Callable[[int], Awaitable[bool]], brokers: Members, *,
               reachable: Collection[int] | None = None) -> Outcome:
    """Make ``members`` the member set of ``name`` from epoch ``current_epoch + 1``, ``leader``
    kept: the epoch and the new set reserved durably first (``reserve``; False: another
    driver did, this one stops), then Assign to the leader (it keeps its publishers and opens
    the epoch: commits count the new set from its first chunk) and to each other member. A
    member not reached is assigned by the driver's usual pass over returning members."""
    epoch = current_epoch + 1
    outcome = Outcome(epoch)
    if not await reserve(epoch):
        outcome.lost = True
        return outcome
    if not await brokers.assign(leader, name, epoch, Role.LEADER, leader, members):
        return outcome
    outcome.assigned.append(leader)
    for m in members:
        if m != leader and (reachable is None or m in reachable) and await brokers.assign(
                m, name, epoch, Role.FOLLOWER, leader, members):
            outcome.assigned.append(m)
    log.info("stream %s: members %s from epoch %d, led by member %d", name, list(members),
             epoch, leader)
    return outcome
