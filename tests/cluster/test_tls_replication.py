"""Replication over TLS: three real brokers on loopback, each TLS only ([listeners.rabbitmq]
enabled = false) with [tls] verify_peer, so the brokers' own links (creates, followers pulling
chunks, elections' Fence and Assign) can only be mutual TLS. A replicated stream commits on
every member, a killed leader is replaced by an election without losing a confirmed message,
and a broker whose certificate the CA did not sign cannot follow: the stream goes on with the
other two, and the member's contact says it is not following."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamlet.client import Client, connect
from streamlet.client.errors import ConnectionClosed
from streamlet.driver.elector import Members, run_election
from tests.support.brokers import BrokerProcess, free_port
from tests.support.certs import issue, make_ca
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

HOST = "127.0.0.1"
USER, PASSWORD = "admin", "admin-pw"
N = 300
STREAM = "tls-replicated"


@pytest.fixture
def certs(certs: Path) -> Path:
    """tests/conftest.py's certificates and ``rogue``, a server certificate for 127.0.0.1
    signed by another CA (``rogue-ca``)."""
    make_ca(certs, "rogue-ca", "not-the-streamlet-ca")
    issue(certs, "rogue", "localhost", server=True, ca="rogue-ca")
    return certs


def client_context(certs: Path) -> ssl.SSLContext:
    """The test's own connections: both CAs trusted (to ask the rogue broker too), the client
    certificate presented (verify_peer)."""
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    ctx.load_verify_locations(certs / "rogue-ca.crt")
    ctx.load_cert_chain(certs / "client.crt", certs / "client.key")
    return ctx


class TlsCluster:
    """Three TLS-only brokers whose cluster.peers are each other's TLS ports."""

    def __init__(self, root: Path, certs: Path) -> None:
        self.root, self.certs = root, certs
        self.ports = [free_port() for _ in range(3)]
        self.nodes: list[BrokerProcess] = []
        for i in range(3):
            self.nodes.append(BrokerProcess(root / f"n{i}" / "data", port=self.ports[i],
                                            config=self.write_config(i, "server"),
                                            extra_args=["--metrics-port", "0", "--http-port", "0"]))

    def write_config(self, i: int, cert: str, resume_roles: bool = False) -> Path:
        peers = ", ".join(f'"{HOST}:{p}"' for p in self.ports)
        path = self.root / f"n{i}" / "broker.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"""
[[users]]
name = "{USER}"
password = "{PASSWORD}"

[cluster]
member = {i}
peers = [{peers}]
resume_roles = {"true" if resume_roles else "false"}

[tls]
port = {self.ports[i]}
certfile = "{self.certs / f'{cert}.crt'}"
keyfile = "{self.certs / f'{cert}.key'}"
cafile = "{self.certs / 'ca.crt'}"
verify_peer = true

[listeners.rabbitmq]
enabled = false
""")
        return path

    def start(self) -> TlsCluster:
        for node in self.nodes:
            node.start()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()

    async def client(self, i: int) -> Client:
        return await connect(HOST, self.ports[i], USER, PASSWORD, ssl=client_context(self.certs),
                             heartbeat=0)

    def members(self) -> Members:
        """What a placement driver speaks to the brokers with: over TLS, on the TLS ports."""
        return Members(lambda m: (HOST, self.ports[m]), (USER, PASSWORD),
                       tls=client_context(self.certs))

    async def stats(self, i: int) -> dict[str, int] | None:
        try:
            client = await self.client(i)
        except (OSError, ConnectionError, TimeoutError):
            return None
        try:
            return await client.stream_stats(STREAM)
        except Exception:
            return None
        finally:
            await client.close()

    async def committed_everywhere(self, members: list[int], last_chunk: int) -> bool:
        for i in members:
            stats = await self.stats(i)
            if stats is None or stats["committed_chunk_id"] < last_chunk:
                return False
        return True


@pytest.fixture
def cluster(tmp_path: Path, certs: Path) -> Iterator[TlsCluster]:
    c = TlsCluster(tmp_path / "c", certs).start()
    try:
        yield c
    finally:
        c.stop()


async def _create(c: TlsCluster) -> int:
    """The replicated stream, created through member 0 (which places it on all three over
    TLS); its leader's member id."""
    client = await c.client(0)
    try:
        await client.create_stream(STREAM, {"initial-cluster-size": "3"})
        leader = await client.leader(STREAM)
    finally:
        await client.close()
    assert leader is not None
    return c.ports.index(leader[1])


async def _publish(c: TlsCluster, leader: int, bodies: list[bytes]) -> int:
    """Publish with confirms (flush waits for them all) on the leader; its last chunk id."""
    client = await c.client(leader)
    try:
        producer = await client.producer(STREAM)
        await producer.send_many(bodies)
        await producer.flush()
        await producer.close()
        return (await client.stream_stats(STREAM))["last_chunk_id"]
    finally:
        await client.close()


async def _read_all(c: TlsCluster, member: int, count: int) -> list[bytes]:
    client = await c.client(member)
    try:
        consumer = await client.consumer(STREAM, "first", credit=50)
        got: list[bytes] = []
        async for message in consumer:
            got.append(message.body)
            if len(got) == count:
                break
        return got
    finally:
        await client.close()


async def test_a_tls_only_cluster_replicates_and_fails_over(cluster: TlsCluster) -> None:
    c = cluster
    leader = await _create(c)
    first = [f"m{i}".encode() for i in range(N)]
    last = await _publish(c, leader, first)
    # every member has it committed: the followers pulled it over mutual TLS
    await eventually(lambda: c.committed_everywhere([0, 1, 2], last), 60,
                     "the chunks committed on every member")

    c.nodes[leader].kill()
    members = c.members()

    async def reserve(epoch: int) -> bool:
        return True

    outcome = await run_election(STREAM, [0, 1, 2], 1, reserve, members)
    assert outcome.decision is not None and outcome.leader not in (-1, leader), outcome
    new = outcome.leader
    assert sorted(outcome.assigned) == sorted(m for m in (0, 1, 2) if m != leader)

    more = [f"n{i}".encode() for i in range(N)]
    last = await _publish(c, new, more)
    others = [m for m in (0, 1, 2) if m != leader]
    await eventually(lambda: c.committed_everywhere(others, last), 60,
                     "the new epoch's chunks committed on both live members")
    # no confirmed message lost, none twice, in order, on the new leader and its follower
    for m in others:
        assert await _read_all(c, m, 2 * N) == first + more


async def test_a_broker_with_a_certificate_not_of_the_ca_cannot_follow(
        cluster: TlsCluster) -> None:
    c = cluster
    leader = await _create(c)
    last = await _publish(c, leader, [b"before"] * 10)
    await eventually(lambda: c.committed_everywhere([0, 1, 2], last), 60,
                     "the chunks committed on every member")
    # a follower comes back with a certificate of another CA, taking up its role by itself
    rogue = next(m for m in (0, 1, 2) if m != leader)
    c.nodes[rogue].stop()
    c.nodes[rogue].config = c.write_config(rogue, "rogue", resume_roles=True)
    c.nodes[rogue].start()

    last = await _publish(c, leader, [b"after"] * 10)  # the leader and one follower: a majority
    good = [m for m in (0, 1, 2) if m != rogue]
    await eventually(lambda: c.committed_everywhere(good, last), 60,
                     "the chunks committed on the leader and the good follower")
    members = c.members()

    async def not_following() -> bool:
        contact = await members.contact(rogue, STREAM)
        return contact is not None and contact.age is None  # a member, without a link

    # under-replicated as a driver sees it: the member is there, but has no link to its leader
    await eventually(not_following, 30, "the rogue member reported without a link")
    # the leader's verify_peer refuses the rogue's certificate as a client's too
    rogue_ctx = ssl.create_default_context(cafile=str(c.certs / "ca.crt"))
    rogue_ctx.load_cert_chain(c.certs / "rogue.crt", c.certs / "rogue.key")
    with pytest.raises((ssl.SSLError, ConnectionError, ConnectionClosed)):  # TLS 1.3: after
        client = await connect(HOST, c.ports[leader], USER, PASSWORD, ssl=rogue_ctx, heartbeat=0)
        await client.close()
    stats = await c.stats(rogue)
    assert stats is not None and stats["committed_chunk_id"] < last
    assert c.nodes[rogue].alive() and c.nodes[leader].alive()
