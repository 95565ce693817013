"""What a member checks of a driver's Fence and Assign before it saves anything, a driver's
fencing token, which peer an address is, and two leaders in one epoch: tables."""

from __future__ import annotations

import pytest

from streamlet.replication.requests import (
    EpochLeader,
    assign_refusal,
    fence_refusal,
    named_peer,
    peer_index,
    token_refusal,
    two_leaders,
)

PEERS = [("b-0.b.ns.svc.cluster.local", 5552), ("b-1.b.ns.svc.cluster.local", 5552),
         ("10.0.0.3", 5551), ("::1", 5552)]
B0, B1 = PEERS[0], PEERS[1]


@pytest.mark.parametrize(("address", "exact", "named"), [
    pytest.param(B0, 0, 0, id="a configured peer"),
    pytest.param(("B-1.b.NS.svc.cluster.local.", 5552), 1, 1,
                 id="host case and a trailing dot do not matter"),
    pytest.param(("[::1]", 5552), 3, 3, id="IPv6 brackets"),
    pytest.param(("10.0.0.3", 5552), None, 2,
                 id="another port of a peer's host: that broker's other listener"),
    pytest.param(("b-0.b.ns.svc", 5552), None, 0, id="without the cluster domain: named"),
    pytest.param(("b-0", 5552), None, 0, id="the pod's name alone: one peer starts with it"),
    pytest.param(("b-0.b.ns.svc", 5551), None, 0, id="named, on another port: that broker"),
    pytest.param(("b", 5552), None, None, id="a start that is not a label: none"),
    pytest.param(("b-0.b.ns.svc.cluster.local.evil.com", 5552), None, None,
                 id="a peer's name extended: none"),
    pytest.param(("evil.com", 5552), None, None, id="a stranger"),
    pytest.param(("", 5552), None, None, id="no host"),
])
def test_peer_index(address: tuple[str, int], exact: int | None, named: int | None) -> None:
    assert peer_index(PEERS, address) == exact
    assert named_peer(PEERS, address) == named


def test_a_start_two_peers_share_names_none() -> None:
    peers = [("b-1.x", 1), ("b-1.y", 1)]
    assert named_peer(peers, ("b-1", 1)) is None


@pytest.mark.parametrize(("address", "named"), [
    pytest.param(("127.0.0.1", 7001), 1, id="the exact address"),
    pytest.param(("127.0.0.1", 5552), None, id="brokers sharing a host: another port is none"),
    pytest.param(("b-0.b.ns.svc.cluster.local", 5552), 0,
                 id="a pod's plain port: the pod, whose peer address is its TLS port"),
    pytest.param(("b-0.b.ns.svc", 5552), 0, id="the same, without the cluster domain"),
])
def test_a_host_on_another_port(address: tuple[str, int], named: int | None) -> None:
    """A driver that names the leader by its plain port (what every broker of a Broker with
    TLS beside the plain listener accepts) names the member whose peer address is its TLS
    port; brokers sharing a host (a local cluster) are told apart by their ports only."""
    peers = [("b-0.b.ns.svc.cluster.local", 5551), ("127.0.0.1", 7001), ("127.0.0.1", 7002)]
    assert named_peer(peers, address) == named


@pytest.mark.parametrize(("epoch", "peers", "refused"), [
    pytest.param(1, PEERS, None, id="the first epoch"),
    pytest.param(2**40, PEERS, None, id="a high one"),
    pytest.param(0, PEERS, "epoch 0: epochs start at 1", id="epoch 0"),
    pytest.param(-1, PEERS, "epoch -1: epochs start at 1", id="negative"),
    pytest.param(5, [], "no [cluster] peers", id="a broker in no cluster"),
])
def test_fence(epoch: int, peers: list[tuple[str, int]], refused: str | None) -> None:
    why = fence_refusal(epoch, peers)
    assert (why is None) == (refused is None)
    if refused is not None:
        assert why is not None and refused in why


# (epoch, leading, leader, members, peers, me, refusal or None); this broker is member 1
ASSIGN = [
    pytest.param(1, False, B0, [0, 1, 2], PEERS, 1, None, id="follower of a peer"),
    pytest.param(1, True, B1, [0, 1, 2], PEERS, 1, None, id="leader, named as itself"),
    pytest.param(3, False, ("b-0.b.ns.svc", 5552), [0, 1], PEERS, 1, None,
                 id="the leader named without the cluster domain"),
    pytest.param(1, False, B0, [0, 1], [], 1, "no [cluster] peers", id="no cluster"),
    pytest.param(1, False, B0, [0, 1], PEERS, None, "no [cluster] peers", id="no member id"),
    pytest.param(0, False, B0, [0, 1], PEERS, 1, "epochs start at 1", id="epoch 0"),
    pytest.param(1, False, B0, [], PEERS, 1, "no members", id="no members"),
    pytest.param(1, False, B0, [0, 1, 1], PEERS, 1, "listed twice", id="a member twice"),
    pytest.param(1, False, B0, [0, 1, 4], PEERS, 1, "members [4]: not among the 4",
                 id="a member id past the peers"),
    pytest.param(1, False, B0, [0, 1, -1], PEERS, 1, "members [-1]", id="a negative id"),
    pytest.param(1, False, B0, [0, 2], PEERS, 1, None,
                 id="a follower outside the members: a learner"),
    pytest.param(1, True, B1, [0, 2], PEERS, 1, "not among the members",
                 id="told to lead a set it is not in"),
    pytest.param(1, False, ("127.0.0.1", 6666), [0, 1], PEERS, 1, "not one of cluster.peers",
                 id="a leader that is no peer"),
    pytest.param(1, False, ("10.0.0.3", 5552), [0, 1, 2], PEERS, 1, None,
                 id="a peer's host on another port (the plain one, with TLS peers): that peer"),
    pytest.param(1, False, PEERS[2], [0, 1], PEERS, 1, "(member 2) is not among the members",
                 id="a leader that is a peer but no member"),
    pytest.param(1, True, B0, [0, 1], PEERS, 1, "told to lead, but the leader named is member 0",
                 id="leader, another named"),
    pytest.param(1, False, B1, [0, 1], PEERS, 1, "told to follow itself", id="follow itself"),
]


@pytest.mark.parametrize(("epoch", "leading", "leader", "members", "peers", "me", "refused"),
                         ASSIGN)
def test_assign(epoch: int, leading: bool, leader: tuple[str, int], members: list[int],
                peers: list[tuple[str, int]], me: int | None, refused: str | None) -> None:
    why = assign_refusal(epoch, leading, leader, members, peers, me)
    assert (why is None) == (refused is None), why
    if refused is not None:
        assert why is not None and refused in why


@pytest.mark.parametrize(("known", "claimed", "expected"), [
    pytest.param(None, EpochLeader(3, 1), False, id="nothing known"),
    pytest.param(EpochLeader(3, 0), EpochLeader(3, 0), False, id="the same leader"),
    pytest.param(EpochLeader(3, 0), EpochLeader(3, 2), True, id="another leader, same epoch"),
    pytest.param(EpochLeader(3, 0), EpochLeader(4, 2), False, id="a later epoch: a new leader"),
    pytest.param(EpochLeader(4, 0), EpochLeader(3, 2), False, id="an earlier epoch's"),
    pytest.param(EpochLeader(3, None), EpochLeader(3, 2), False, id="known leader no peer"),
    pytest.param(EpochLeader(3, 0), EpochLeader(3, None), False, id="claimed leader no peer"),
])
def test_two_leaders(known: EpochLeader | None, claimed: EpochLeader, expected: bool) -> None:
    assert two_leaders(known, claimed) is expected


@pytest.mark.parametrize(("token", "highest", "refused"), [
    pytest.param(None, 0, None, id="no token, none seen: a driver without a Lease"),
    pytest.param(None, 7, None, id="no token, one seen: still taken"),
    pytest.param("1", 0, None, id="the first token"),
    pytest.param("7", 7, None, id="the highest again: the same leader"),
    pytest.param("8", 7, None, id="a higher one: a new leader"),
    pytest.param("6", 7, "fencing token 6 is below 7", id="a lower one: a deposed leader"),
    pytest.param("0", 1, "fencing token 0 is below 1", id="zero below one"),
    pytest.param("-1", 0, "not a number", id="negative"),
    pytest.param("x", 0, "not a number", id="not a number"),
    pytest.param("", 0, "not a number", id="empty"),
    pytest.param("\u0667", 0, "not a number", id="a non-ASCII digit"),
])
def test_token_refusal(token: str | None, highest: int, refused: str | None) -> None:
    why = token_refusal(token, highest)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why
