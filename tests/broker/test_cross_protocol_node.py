"""Written through MEGA and RSIO (the project's clients), read with RabbitMQ's Node.js client
(rabbitmq-stream-js-client, tests/node/read_stream.js) from a real broker: the same offsets and
bytes. That client decodes every record as an AMQP 1.0 message, so these producers write AMQP
1.0 data sections; what it does with a raw body is the last test (docs/protocols/mega.md,
"What other protocols see")."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamlet.client.mega import MegaClient
from streamlet.client.rsio import RsioClient
from tests.node.test_node_client import node_client  # noqa: F401 (the fixture: npm ci)
from tests.support.brokers import BrokerProcess, free_port, wait_for_port

pytestmark = pytest.mark.process

READER = Path(__file__).parents[1] / "node" / "read_stream.js"


def data_section(body: bytes) -> bytes:
    """An AMQP 1.0 message of one data section holding ``body``: descriptor 0x75, then vbin8
    (0xa0, u8 length) or vbin32 (0xb0, u32 length)."""
    if len(body) < 256:
        return b"\x00\x53\x75\xa0" + bytes([len(body)]) + body
    return b"\x00\x53\x75\xb0" + struct.pack(">I", len(body)) + body


class Broker(BrokerProcess):
    mega_port: int
    rsio_port: int


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    root = tmp_path_factory.mktemp("cross-node")
    mega, rsio = free_port(), free_port()
    b = Broker(root / "data", extra_args=["--mega-port", str(mega), "--rsio-port", str(rsio)])
    b.mega_port, b.rsio_port = mega, rsio
    b.start()
    wait_for_port(b.host, mega, proc=b.proc)
    wait_for_port(b.host, rsio, proc=b.proc)
    yield b
    b.stop()


def node_read(b: Broker, stream: str, count: int) -> dict[str, list]:
    res = subprocess.run(["node", str(READER), b.host, str(b.port), stream, str(count), "60000"],
                         capture_output=True, text=True, timeout=120)
    lines = res.stdout.strip().splitlines()
    assert lines, f"no report from node (rc {res.returncode}):\n{res.stderr}"
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def bodies(tag: str, n: int) -> list[bytes]:
    # short ones (vbin8), one of 300 bytes and one past RSIO's split size (vbin32, sent in parts)
    out = [f"{tag}-{i}".encode() for i in range(n - 2)]
    return out + [b"m" * 300, bytes(range(256)) * 300]


async def test_mega_to_the_node_client(broker: Broker, node_client: Path) -> None:  # noqa: F811
    sent = bodies("mega", 100)
    async with await MegaClient.connect(broker.host, broker.mega_port) as c:
        await c.create_topic("x-mega-node")
        # pipelined: answers may come in any order, each with its message's offset
        offsets = [await c.produce("x-mega-node", data_section(x)) for x in sent[:10]]
        offsets += await _gather(c, "x-mega-node", sent[10:])
        # an empty payload: read as an AMQP message without sections, content empty
        assert await c.produce("x-mega-node", b"") == 100
    assert sorted(offsets) == list(range(100))
    report = node_read(broker, "x-mega-node", 101)
    assert report["errors"] == []
    got = {m["offset"]: bytes.fromhex(m["content"]) for m in report["messages"]}
    assert got == {**dict(zip(offsets, sent, strict=True)), 100: b""}


async def _gather(c: MegaClient, topic: str, xs: list[bytes]) -> list[int]:
    return list(await asyncio.gather(*[c.produce(topic, data_section(x)) for x in xs]))


async def test_rsio_to_the_node_client(broker: Broker, node_client: Path) -> None:  # noqa: F811
    sent = bodies("rsio", 100)
    async with await RsioClient.connect(broker.host, broker.rsio_port) as c:
        assert await c.publish("x-rsio-node", [data_section(x) for x in sent], create=True) == 100
        # the offsets RSIO gives them (extension 1) and their bytes, read back through RSIO
        mine = {e.offset: e.body for e in await c.read("x-rsio-node")}
    assert mine == {i: data_section(x) for i, x in enumerate(sent)}
    report = node_read(broker, "x-rsio-node", 100)
    assert report["errors"] == []
    got = {m["offset"]: bytes.fromhex(m["content"]) for m in report["messages"]}
    assert got == dict(enumerate(sent))


async def test_a_raw_body_stops_the_node_client(broker: Broker, node_client: Path) -> None:  # noqa: F811
    """A body that is not an AMQP message: the Node client throws from its socket handler
    ("Not supported format code" of the body's third byte) and hands over nothing more, not
    even the AMQP message of a later chunk."""
    async with await MegaClient.connect(broker.host, broker.mega_port) as c:
        await c.create_topic("x-raw-node")
        # one at a time: each is confirmed, so each is a chunk of its own
        assert await c.produce("x-raw-node", data_section(b"before")) == 0
        assert await c.produce("x-raw-node", b"hello") == 1
        assert await c.produce("x-raw-node", data_section(b"after")) == 2
    report = node_read(broker, "x-raw-node", 3)
    assert report["messages"] == [{"offset": 0, "content": b"before".hex()}]
    assert report["errors"] == [f"Not supported format code {ord('l')}"]
