"""Replication over TLS beside a plain client listener: three real brokers on loopback with
[tls] and their plaintext port both open, no [cluster] tls said. Clients publish and read in
plaintext; the brokers' own links (the Create placing the members, followers pulling chunks)
go to each other's TLS port over TLS all the same, as the leader's management API shows: every
connection of the replication user reached its TLS port, with TLS, none its plain port."""

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
from tests.support.brokers import BrokerProcess, distinct_ports
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

HOST = "127.0.0.1"
USER, PASSWORD = "admin", "admin-pw"
STREAM = "over-tls"
N = 200


class Cluster:
    """Three brokers, each with a plain port (clients), a TLS port (cluster.peers) and a
    management API."""

    def __init__(self, root: Path, certs: Path) -> None:
        ports = distinct_ports(9)
        self.plain, self.tls, self.http = ports[0:3], ports[3:6], ports[6:9]
        peers = ", ".join(f'"{HOST}:{p}"' for p in self.tls)
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
certfile = "{certs / 'server.crt'}"
keyfile = "{certs / 'server.key'}"
cafile = "{certs / 'ca.crt'}"
""")
            self.nodes.append(BrokerProcess(
                root / f"n{i}" / "data", port=self.plain[i], config=config,
                extra_args=["--metrics-port", "0", "--http-port", str(self.http[i])]))

    async def client(self, i: int) -> Client:
        return await connect(HOST, self.plain[i], USER, PASSWORD, heartbeat=0)

    def connections(self, i: int) -> list[dict[str, Any]]:
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        req = urllib.request.Request(f"http://{HOST}:{self.http[i]}/api/connections",
                                     headers={"Authorization": f"Basic {auth}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            found: list[dict[str, Any]] = json.loads(resp.read())
            return found

    async def committed(self, i: int, chunk: int) -> bool:
        client = await self.client(i)
        try:
            return bool((await client.stream_stats(STREAM))["committed_chunk_id"] >= chunk)
        except Exception:
            return False
        finally:
            await client.close()


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


async def test_the_brokers_replicate_over_tls_while_clients_use_plaintext(
        cluster: Cluster) -> None:
    c = cluster
    client = await c.client(0)
    try:
        await client.create_stream(STREAM, {"initial-cluster-size": "3"})
        leader_address = await client.leader(STREAM)
    finally:
        await client.close()
    assert leader_address is not None
    leader = c.plain.index(leader_address[1])  # clients are told the plain port
    client = await c.client(leader)
    try:
        producer = await client.producer(STREAM)
        await producer.send_many([f"m{i}".encode() for i in range(N)])
        await producer.flush()
        await producer.close()
        last = (await client.stream_stats(STREAM))["last_chunk_id"]
    finally:
        await client.close()

    async def everywhere() -> bool:
        return all([await c.committed(i, last) for i in range(3)])

    await eventually(everywhere, 60, "the chunks committed on every member")
    # the followers' links, as the leader sees them: to its TLS port, over TLS
    links = [conn for conn in c.connections(leader)
             if conn["client_properties"].get("connection_name") == PEER_CONNECTION]
    followers = {conn["peer_port"] for conn in links}
    assert len(followers) >= 2, links  # one link per follower at least
    assert {(conn["port"], conn["ssl"]) for conn in links} == {(c.tls[leader], True)}, links
