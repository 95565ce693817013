"""An SBP client follows a range to its new server after a leader change, on a real
3-node `streamlet cluster up --sbp-port`: a stream made replicated by rstream's create with
initial-cluster-size 3, an SBP client that found its primary with LIST_RANGES on another broker
(``streamlet.client.sbp.follow``) appends, its leader's broker is killed (kill -9 of the pid
`cluster status --json` gives), the client loses its connection or is told NOT_PRIMARY, finds
the new primary through a surviving broker and appends there. Every acknowledged append is then
in the stream once, at the offset it was answered, read with FETCH and with rstream."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from streamlet.client.sbp import SbpClient, SbpError, follow
from streamlet.sbp import ErrorCode
from streamlet.sbp.headers import text
from tests.cluster.test_local_cluster import HOST, Cluster, free_base, status_json
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

NAME = "sbp-f"
BEFORE, AFTER = 300, 300  # acknowledged appends before the kill, and after the new primary's
PER_FRAME = 5


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    sbp = free_base(3)
    c = Cluster(tmp_path / "c", 3, ["--sbp-port", str(sbp)]).start()
    c.sbp_ports = [sbp + i for i in range(3)]  # type: ignore[attr-defined]
    yield c
    c.stop()


def _leader(cluster: Cluster) -> int | None:
    for s in status_json(cluster.data_dir)["streams"]:
        if s["name"] == NAME and s["leader"] is not None and s["committed"] is not None:
            return int(s["leader"])
    return None


async def _primary_port(client: SbpClient) -> int:
    (r,) = await client.list_ranges(NAME)
    (primary,) = [s for s in r.servers if s.isPrimary]
    return int(text(primary.server.advertiseAddr).rpartition(":")[2])


async def _followed(cluster: Any, via: int, not_port: int | None = None) -> SbpClient | None:
    """A client on the primary named by broker ``via`` (None while it names none, a dead one,
    or ``not_port``)."""
    try:
        client = await asyncio.wait_for(follow(HOST, cluster.sbp_ports[via], NAME), 10)
    except (OSError, SbpError, TimeoutError, ConnectionError):
        return None
    if client.writer.get_extra_info("peername")[1] == not_port:
        await client.close()
        return None
    return client


async def test_an_sbp_client_follows_its_range_to_the_new_primary(cluster: Any) -> None:
    from rstream import Consumer, ConsumerOffsetSpecification, MessageContext, OffsetType, Producer

    ports = cluster.ports()
    async with Producer(HOST, port=ports[1], username="guest", password="guest") as producer:
        await producer.create_stream(NAME, arguments={"initial-cluster-size": 3})
    leader = await eventually(lambda: _leader(cluster), timeout=30, what="the stream's leader")
    assert leader == 1, "client-local: the broker that got the Create leads"

    await _server_ids(cluster)
    # found through another broker: LIST_RANGES there names the leader's SBP address
    other = (leader + 1) % 3
    client = await eventually(lambda: _followed(cluster, other), timeout=30, what="a primary")
    assert client.writer.get_extra_info("peername")[1] == cluster.sbp_ports[leader]

    acked: dict[bytes, int] = {}  # body -> the offset its append was answered with
    attempts = 0
    refusals: list[str] = []

    async def append_some(c: SbpClient, until: int) -> None:
        """Append frames of PER_FRAME batches until ``until`` are acknowledged; every attempt
        has a body of its own, so a batch stored but never answered is told apart."""
        nonlocal attempts
        while len(acked) < until:
            bodies = [b"b%d" % (attempts + i) for i in range(PER_FRAME)]
            attempts += PER_FRAME
            answers = await asyncio.wait_for(c.append_many((NAME, b) for b in bodies), 30)
            for body, (offset, code, message) in zip(bodies, answers, strict=True):
                if code == ErrorCode.NONE:
                    acked[body] = offset
                else:
                    refusals.append(f"{code}: {message}")
                    raise SbpError(code, message)

    await append_some(client, BEFORE)
    pid = status_json(cluster.data_dir)["nodes"][leader]["pid"]
    os.kill(pid, signal.SIGKILL)

    # the client learns it: its connection is lost (or a NOT_PRIMARY, if it still answered)
    with pytest.raises((ConnectionError, OSError, SbpError)):
        await append_some(client, BEFORE + 10_000)
    await client.close()
    assert all(r.startswith(f"{ErrorCode.NOT_PRIMARY}:") for r in refusals), refusals

    # a surviving broker names the new primary once the driver has elected it
    survivor = next(i for i in range(3) if i != leader)
    moved: list[SbpClient] = []

    async def appended_on_new_primary() -> bool:
        c = await _followed(cluster, survivor, not_port=cluster.sbp_ports[leader])
        if c is None:
            return False
        try:
            await append_some(c, BEFORE + AFTER)
        except (ConnectionError, OSError, SbpError, TimeoutError):
            await c.close()
            return False  # not the primary yet (NOT_PRIMARY) or went away: LIST_RANGES again
        moved.append(c)
        return True

    await eventually(appended_on_new_primary, timeout=90, what="appends on the new primary")
    new = moved[0]
    new_port = new.writer.get_extra_info("peername")[1]
    assert new_port != cluster.sbp_ports[leader]
    assert await _primary_port(new) == new_port
    assert len(acked) >= BEFORE + AFTER

    # FETCH from the new primary: every acknowledged batch once, at its offset
    stored: dict[int, bytes] = {}
    offset = 0
    while True:
        got = await new.fetch(NAME, offset, max_wait_ms=0)
        if not got:
            break
        stored.update((o, bytes(b)) for o, b in got)
        offset = got[-1][0] + 1
    await new.close()
    check(acked, stored, attempts)

    # rstream, on the follower that stayed up: the same messages at the same offsets
    follower = next(i for i in range(3) if i != leader and cluster.sbp_ports[i] != new_port)
    seen: dict[int, bytes] = {}
    # rstream's consumer may pick any member Metadata lists: the killed one must be back
    await eventually(cluster.all_listening, timeout=60, what="the killed broker restarted")

    async def on_message(body: bytes, context: MessageContext) -> None:
        seen[context.offset] = bytes(body)

    consumer = Consumer(HOST, ports[follower], username="guest", password="guest")
    await consumer.start()
    try:
        await consumer.subscribe(NAME, on_message, offset_specification=(
            ConsumerOffsetSpecification(OffsetType.FIRST, None)))
        last = max(acked.values())
        await eventually(lambda: last in seen, timeout=60, what="rstream read the last append")
    finally:
        await consumer.close()
    check(acked, {o: b for o, b in seen.items() if o <= max(stored)}, attempts)
    assert {o: b for o, b in seen.items() if o in stored} == stored


async def _server_ids(cluster: Any) -> None:
    """Each broker's range server (its member id, its own SBP address) as every broker names
    it: DESCRIBE_PD_CLUSTER's nodes, and ALLOCATE_ID of each address."""
    from streamlet.sbp import Opcode
    from streamlet.sbp.fbs.AllocateIdRequest import AllocateIdRequestT
    from streamlet.sbp.fbs.DescribePlacementDriverClusterRequest import (
        DescribePlacementDriverClusterRequestT,
    )

    want = [f"{HOST}:{p}" for p in cluster.sbp_ports]
    for asked in range(3):
        async with await SbpClient.connect(HOST, cluster.sbp_ports[asked]) as c:
            ((t, _),) = await c.request(Opcode.DESCRIBE_PD_CLUSTER,
                                        DescribePlacementDriverClusterRequestT())
            nodes = t.cluster.nodes
            assert [text(n.advertiseAddr) for n in nodes] == want
            assert [n.isLeader for n in nodes] == [i == asked for i in range(3)]
            for i, addr in enumerate(want):
                req = AllocateIdRequestT()
                req.host = addr
                ((a, _),) = await c.request(Opcode.ALLOCATE_ID, req)
                assert (a.id, a.status.code) == (i, 0), addr


def check(acked: dict[bytes, int], stored: dict[int, bytes], attempts: int) -> None:
    bodies = list(stored.values())
    for body, offset in acked.items():
        assert stored.get(offset) == body, f"{body!r} acknowledged at {offset}"
        assert bodies.count(body) == 1, f"{body!r} stored {bodies.count(body)} times"
    # nothing else: at most batches sent but never answered (lost with the old leader's socket)
    extra = [b for b in bodies if b not in acked]
    assert all(b.startswith(b"b") and int(b[1:]) < attempts for b in extra), extra[:5]
    assert len(extra) <= 2 * PER_FRAME, f"{len(extra)} unacknowledged batches stored"
    # in acknowledgement order: offsets grow with the attempts
    order = sorted(acked, key=lambda b: int(b[1:]))
    assert [acked[b] for b in order] == sorted(acked.values())
