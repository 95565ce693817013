"""Fuzzing the private replication commands (keys 0x7E01-0x7E11) on a real broker process that
is member 0 of a two-broker cluster (the other peer runs nothing), then restarting it.

As an application user with configure permission: random and mutated commands, not one answered
OK and nothing saved. As the replication user, which the broker takes when valid: whatever it
saves must not keep it from starting; stopped and started on the same data (``resume_roles``),
it must come up, set no stream aside, and serve a publish and a consume.
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from streamlet.broker.replication.member import MemberState
from streamlet.client import connect
from streamlet.rabbitmq import Code
from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.constants import REPLICATION_KEYS
from streamlet.rabbitmq.frames import replication as rf
from tests.broker.test_replication_auth import APP, USERS, _peers
from tests.rsio.test_rsio_codec import mutate
from tests.support.brokers import BrokerProcess, distinct_ports
from tests.support.raw import RawPeer

pytestmark = pytest.mark.process

Factory = Callable[..., BrokerProcess]
HOST = "127.0.0.1"
STREAMS = ["app-0", "app-1", "g-0", "none", ""]
EPOCHS = [0, 0, 1, 1, 2, 3, 7, 2**32, 2**63 - 1, 2**64 - 1]
CONNECTIONS = 120  # per user: an application user's ends at its first unanswered command
FRAMES = 30  # per connection
MARK = 0x7FFF_FFF0  # the correlation id of each connection's last request, a Metadata


def random_command(rng: random.Random, corr: int, ports: list[int]) -> f.Command:
    stream, epoch = rng.choice(STREAMS), rng.choice(EPOCHS)
    host = rng.choice([HOST, HOST, HOST, "localhost", "evil.example", ""])
    port = rng.choice([*ports, *ports, 1, 65535])
    members = rng.sample([0, 0, 1, 1, 2, 7, 65535], rng.randrange(0, 4))
    tail = (rng.choice(EPOCHS), rng.choice([-1, 0, 5]), rng.choice([0, 1, 100]))
    # answered ones mostly: those without an answer (and a leader's, which no broker takes)
    # end an application user's connection
    kind = rng.choices(range(14), weights=[6, 8, 3, 2, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1])[0]
    if kind == 0:
        return rf.Fence(corr, stream, epoch)
    if kind == 1:
        return rf.Assign(corr, stream, epoch, rng.choice([0, 1, 1, 2, 2, 3]), host, port, members)
    if kind == 2:
        return rf.ReplicaHello(corr, stream, epoch, rng.choice([0, 1, 2]), *tail)
    if kind == 3:
        return rf.ReplicaStart(corr, epoch, *tail)
    if kind == 4:
        return rf.ReplicaContact(corr, stream)
    if kind == 5:
        return rf.ReplicaSeal(corr, stream, epoch, rng.randrange(2))
    if kind == 6:
        return rf.SacJoin(corr, stream, epoch, rng.randrange(4), rng.choice(["g", ""]),
                         rng.choice([-1, 0, 1]))
    if kind == 7:
        return rf.ReplicaAck(epoch, tail[1], tail[2])
    if kind == 8:
        return rng.choice([rf.SacLeave(rng.randrange(4)), rf.SacSteppedDown(rng.randrange(4))])
    if kind == 9:
        return rf.ReplicaChunks(epoch, rng.choice([-1, 0]), rng.randbytes(rng.randrange(0, 80)))
    if kind == 10:
        return rf.ReplicaCommit(epoch, 0)
    if kind == 12:
        return rf.ReplicaLearn(corr, stream, epoch, rng.choice([0, 1, 2, 5]))
    if kind == 13:  # a former member may drop its copy: not of the streams checked after
        return rf.ReplicaLeave(corr, rng.choice(["none", ""]), epoch)
    return rf.SacUpdate(1, 1)


def framed(rng: random.Random, cmd: f.Command) -> tuple[bytes, bool]:
    """The command's frame, or (rarely) its body mutated behind a size that fits it: the
    broker keeps its framing either way. True when mutated."""
    raw = f.encode(cmd)
    if rng.random() >= 0.08:
        return raw, False
    body = mutate(rng, raw[4:])
    return struct.pack(">I", len(body)) + body, True


def fuzz(b: BrokerProcess, user: tuple[str, str], rng: random.Random,
         ports: list[int]) -> dict[str, int]:
    """Every connection sends its frames at once, then a Metadata, and reads until that is
    answered or the broker closes; the answers' codes to replication commands are counted."""
    codes: dict[str, int] = {}
    for _ in range(CONNECTIONS):
        with RawPeer(b.host, b.port) as peer:
            peer.handshake(*user)
            frames = [framed(rng, random_command(rng, peer.next_corr(), ports))[0]
                      for _ in range(FRAMES)]
            peer.send_raw(b"".join(frames) + f.encode(f.Metadata(MARK, [])))
            while (frame := peer.recv_frame()) is not None:
                cmd = f.decode(frame)
                if isinstance(cmd, f.MetadataResponse) and cmd.correlation_id == MARK:
                    break
                if isinstance(cmd, f.FrameError):  # only the answer to a key mutated to none
                    assert cmd.reason.startswith("unknown command key"), cmd
                    continue
                code = getattr(cmd, "code", None)
                if code is not None and cmd.wire_key & 0x7FFF in REPLICATION_KEYS:
                    key = f"{type(cmd).__name__} {code}"
                    codes[key] = codes.get(key, 0) + 1
    return codes


def _states(b: BrokerProcess) -> list[Path]:
    return sorted((b.data_dir / "streams").glob("*/replication.json"))


async def test_fuzzed_replication_commands_leave_a_broker_that_restarts(
        tmp_path: Path, broker_factory: Factory) -> None:
    ports = distinct_ports(2)
    config = tmp_path / "fuzz.toml"
    config.write_text(f"[cluster]\nmember = 0\n{_peers(ports)}resume_roles = true\n{USERS}")
    b = broker_factory(config=config, port=ports[0])
    for user, name in ((APP, "app-0"), (APP, "app-1"), (("guest", "guest"), "g-0")):
        async with await connect(b.host, b.port, *user) as client:
            await client.create_stream(name)
    rng = random.Random(20261124)

    as_app = fuzz(b, APP, rng, ports)
    refused = sum(n for key, n in as_app.items() if key.endswith(f" {Code.ACCESS_REFUSED}"))
    malformed = sum(n for key, n in as_app.items() if key.endswith(f" {Code.UNKNOWN_FRAME}"))
    assert refused > 300 and refused + malformed == sum(as_app.values()), as_app
    assert not _states(b), "an application user's command saved a replication state"
    assert b.alive()

    as_replication = fuzz(b, ("guest", "guest"), rng, ports)
    taken = sum(n for key, n in as_replication.items() if key.endswith(f" {Code.OK}"))
    invalid = sum(n for key, n in as_replication.items()
                  if key.endswith(f" {Code.PRECONDITION_FAILED}"))
    assert taken > 20 and invalid > 20, as_replication  # both kinds, or the fuzz means little
    assert _states(b), "nothing saved: the fuzz never took a valid Fence or Assign"

    b.restart()  # on the same data: it comes up, sets nothing aside, serves
    for path in _states(b):
        MemberState.load(path.parent)  # each saved state reads back
    assert "set aside" not in b.log_text()
    async with await connect(b.host, b.port) as client:
        await client.create_stream("after-restart")
        producer = await client.producer("after-restart")
        await producer.send(b"served")
        await asyncio.wait_for(producer.flush(), 30)
        consumer = await client.consumer("after-restart", "first", credit=1)
        message = await asyncio.wait_for(consumer.__anext__(), 30)
        assert bytes(message.body) == b"served"
        meta = await client.metadata(["app-0", "app-1", "g-0"])
        assert [s.code for s in meta.streams] == [Code.OK] * 3, "the fuzzed streams are there"
