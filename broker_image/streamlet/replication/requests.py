"""What a member checks of a placement driver's request before it saves anything, and when it
has seen two leaders for one epoch. Pure.

``peer_index`` and ``named_peer``: which configured peer an address is (as a link would connect
to it); ``fence_refusal`` and ``assign_refusal``: why a Fence or an Assign cannot be taken (None:
it can); ``token_refusal``: why a deposed placement driver's request is; ``two_leaders``: a
claim about an epoch's leader that contradicts the one this member knows. The rules:
docs/replication.md#requests-requestspy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Address = tuple[str, int]

#: The refusal of every driver request by a broker that is in no cluster.
NO_CLUSTER = "this broker has no [cluster] peers: it is no member of a replicated stream"


def _host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def peer_index(peers: Sequence[Address], address: Address) -> int | None:
    """The member id of the peer at ``address``; None when it is no configured peer."""
    host, port = _host(address[0]), address[1]
    for i, (peer_host, peer_port) in enumerate(peers):
        if peer_port == port and _host(peer_host) == host:
            return i
    return None


def named_peer(peers: Sequence[Address], address: Address) -> int | None:
    """The member id of the peer ``address`` names: that address, or else the one peer on its
    port whose host extends the address's by a domain (``b-0.b.ns.svc`` names
    ``b-0.b.ns.svc.cluster.local``), or else the one peer of that host (or one extending it)
    on any port: the same broker's other listener (a driver names the plain port of brokers
    whose peers are their TLS ports); None when it names none, or more than one."""
    exact = peer_index(peers, address)
    if exact is not None:
        return exact
    host, port = _host(address[0]), address[1]
    if not host:
        return None
    hosts = [i for i, (peer_host, _) in enumerate(peers)
             if _host(peer_host) == host or _host(peer_host).startswith(host + ".")]
    found = [i for i in hosts if peers[i][1] == port]
    if len(found) == 1:
        return found[0]
    return hosts[0] if not found and len(hosts) == 1 else None


def fence_refusal(epoch: int, peers: Sequence[Address]) -> str | None:
    """Why a Fence with ``epoch`` is refused, before anything is saved; None: taken."""
    if not peers:
        return NO_CLUSTER
    if epoch < 1:
        return f"epoch {epoch}: epochs start at 1"
    return None


def assign_refusal(epoch: int, leading: bool, leader: Address, members: Sequence[int],
                   peers: Sequence[Address], me: int | None) -> str | None:
    """Why an Assign is refused, before anything is saved; None: taken. ``leading``: this
    member is told to lead; ``leader``: the leader's address as its followers reach it. A
    follower outside ``members`` is a learner (being added: fed, its acks not counted)."""
    if not peers or me is None:
        return NO_CLUSTER
    if epoch < 1:
        return f"epoch {epoch}: epochs start at 1"
    if not members:
        return "no members"
    if len(set(members)) != len(members):
        return f"members {list(members)}: one listed twice"
    strangers = [m for m in members if not 0 <= m < len(peers)]
    if strangers:
        return f"members {strangers}: not among the {len(peers)} cluster.peers"
    if leading and me not in members:
        return f"this broker (member {me}) is not among the members {list(members)}"
    index = named_peer(peers, leader)
    if index is None:
        return f"leader {leader[0]}:{leader[1]}: not one of cluster.peers"
    if index not in members:
        return f"leader {leader[0]}:{leader[1]} (member {index}) is not among the members"
    if leading and index != me:
        return f"told to lead, but the leader named is member {index}, not this one ({me})"
    if not leading and index == me:
        return "told to follow itself"
    return None


def token_refusal(token: str | None, highest: int) -> str | None:
    """Why a placement driver's request is refused when its connection carries fencing
    ``token`` (the ``streamlet-driver-token`` property as sent; None: none) and this member has
    seen ``highest`` (0: none yet); None: taken. A driver without a Lease sends no token (the
    local cluster's, an operator with one replica or kopf peering): taken, as before tokens."""
    if token is None:
        return None
    if not token.isascii() or not token.isdigit():
        return f"fencing token {token!r}: not a number"
    if int(token) < highest:
        return (f"fencing token {int(token)} is below {highest}, the highest seen: a newer "
                f"placement driver holds the lease")
    return None


@dataclass(frozen=True, slots=True)
class EpochLeader:
    """Who leads ``epoch``: a member id, None when not known (no configured peer)."""

    epoch: int
    leader: int | None


def two_leaders(known: EpochLeader | None, claimed: EpochLeader) -> bool:
    """Whether ``claimed`` (an Assign, or a member's ReplicaHello or SacJoin, which say this
    broker leads) names another leader than the one this member knows for the same epoch. An
    epoch has one leader: two mean a split brain (two drivers, or a driver re-driving an epoch
    with another winner), which nothing else would notice."""
    return (known is not None and known.epoch == claimed.epoch and known.leader is not None
            and claimed.leader is not None and known.leader != claimed.leader)
