"""Replication over TLS beside a plain client listener: three real brokers, each on a loopback
address of its own (127.0.0.1-3), with [tls] and their plaintext port both open, no [cluster]
tls said. Clients publish and read in plaintext; the brokers' own links (the Create placing the
members, followers pulling chunks) go to each other's TLS port over TLS all the same, as the
leader's management API shows: every replication link reached its TLS port, with TLS. A
placement driver that names the new leader by its plain port (as the operator does) gets the
same: each follower links to that member's TLS port, its cluster.peers address."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamlet.broker.replication.peer import PEER_CONNECTION
from streamlet.client import Client, connect
from streamlet.driver.elector import Members, run_election
from tests.support.brokers import BrokerProcess, distinct_ports
from tests.support.certs import issue
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
USER, PASSWORD = "admin", "admin-pw"
STREAM = "over-tls"
N = 200


class Cluster:
    """Three brokers, each with a plain port (clients), a TLS port (cluster.peers) and a
    management API, on its own loopback address (which its certificate names)."""

    def __init__(self, root: Path, certs: Path) -> None:
        issue(certs, "hosts", "localhost", server=True,
              san=",".join(f"IP:{h}" for h in HOSTS))
        ports = distinct_ports(9)
        self.plain, self.tls, self.http = ports[0:3], ports[3:6], ports[6:9]
        peers = ", ".join(f'"{h}:{p}"' for h, p in zip(HOSTS, self.tls, strict=True))
        self.nodes = []
        for i in range(3):
            config = root / f"n{i}" / "broker.toml"
            config.parent.mkdir(parents=True)
            config.write_text(f"""
[[users]]
name = "{USER}"
password = "{PASSWORD}"

[cluster]
member = {i}
peers = [{peers}]

[tls]
port = {self.tls[i]}
certfile = "{certs / 'hosts.crt'}"
keyfile = "{certs / 'hosts.key'}"
cafile = "{certs / 'ca.crt'}"
""")
            node = BrokerProcess(
                root / f"n{i}" / "data", port=self.plain[i], config=config,
                extra_args=["--metrics-port", "0", "--http-port", str(self.http[i])])
            node.host = HOSTS[i]
            self.nodes.append(node)

    async def client(self, i: int) -> Client:
        return await connect(HOSTS[i], self.plain[i], USER, PASSWORD, heartbeat=0)

    def links(self, i: int) -> list[dict[str, Any]]:
        """The replication links to broker ``i``, as its management API lists them."""
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        req = urllib.request.Request(f"http://{HOSTS[i]}:{self.http[i]}/api/connections",
                                     headers={"Authorization": f"Basic {auth}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            found: list[dict[str, Any]] = json.loads(resp.read())
        return [c for c in found
                if c["client_properties"].get("connection_name") == PEER_CONNECTION]

    async def committed(self, i: int, chunk: int) -> bool:
        try:
            client = await self.client(i)
        except (OSError, ConnectionError, TimeoutError):
            return False
        try:
            return bool((await client.stream_stats(STREAM))["committed_chunk_id"] >= chunk)
        except Exception:
            return False
        finally:
            await client.close()

    async def publish(self, leader: int, prefix: str) -> int:
        """N messages with confirms on ``leader``; its last chunk id."""
        client = await self.client(leader)
        try:
            producer = await client.producer(STREAM)
            await producer.send_many([f"{prefix}{i}".encode() for i in range(N)])
            await producer.flush()
            await producer.close()
            return int((await client.stream_stats(STREAM))["last_chunk_id"])
        finally:
            await client.close()

    async def everywhere(self, members: list[int], chunk: int) -> None:
        async def committed() -> bool:
            return all([await self.committed(i, chunk) for i in members])

        await eventually(committed, 60, f"the chunks committed on members {members}")

    def assert_over_tls(self, leader: int, followers: int) -> None:
        links = self.links(leader)
        assert len({(c["peer_host"], c["peer_port"]) for c in links}) >= followers, links
        assert {(c["port"], c["ssl"]) for c in links} == {(self.tls[leader], True)}, links


@pytest.fixture
def cluster(tmp_path: Path, certs: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, certs)
    try:
        for node in c.nodes:
            node.start()
        yield c
    finally:
        for node in c.nodes:
            node.kill()


async def _create(c: Cluster) -> int:
    client = await c.client(0)
    try:
        await client.create_stream(STREAM, {"initial-cluster-size": "3"})
        leader = await client.leader(STREAM)
    finally:
        await client.close()
    assert leader is not None
    return HOSTS.index(leader[0])  # clients are told the leader's plain port


async def test_the_brokers_replicate_over_tls_while_clients_use_plaintext(
        cluster: Cluster) -> None:
    c = cluster
    leader = await _create(c)
    last = await c.publish(leader, "m")
    await c.everywhere([0, 1, 2], last)
    c.assert_over_tls(leader, followers=2)


async def test_a_leader_named_by_its_plain_port_is_followed_over_tls(cluster: Cluster) -> None:
    c = cluster
    old = await _create(c)
    last = await c.publish(old, "m")
    await c.everywhere([0, 1, 2], last)
    c.nodes[old].kill()
    plain = [(h, p) for h, p in zip(HOSTS, c.plain, strict=True)]
    members = Members(lambda m: plain[m], (USER, PASSWORD), peer_address=lambda m: plain[m])

    async def reserve(epoch: int) -> bool:
        return True

    outcome = await run_election(STREAM, [0, 1, 2], 1, reserve, members)
    assert outcome.decision is not None and outcome.leader not in (-1, old), outcome
    new = outcome.leader
    last = await c.publish(new, "n")
    live = [m for m in (0, 1, 2) if m != old]
    await c.everywhere(live, last)
    c.assert_over_tls(new, followers=1)
