"""Issue 10, items 2 and 3: file descriptors are bounded and a broker restarts on whatever a
client made it store; a segment roll on a full disk leaves the stream writable once space is
freed, and refused writes do not flood the log."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streamlet.client import connect
from streamlet.client.producer import Producer, PublishFailed
from streamlet.protocol import Code
from tests.support.brokers import BrokerProcess
from tests.support.waiting import eventually

# --- a full disk --------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs where broker_factory's first broker keeps its data (its log stays outside)."""
    mnt = tmp_path / "broker0" / "data"
    mnt.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path) -> Path:
    """Fill the file system to its last byte with one file (returned, to free the space)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        block = 1 << 16
        while block:
            try:
                os.write(fd, b"\0" * block)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                block //= 2
    finally:
        os.close(fd)
    return filler


async def publish(producer: Producer, body: bytes) -> int | None:
    """Send one message and wait for its answer: None when confirmed, else the error code."""
    await producer.send(body)
    try:
        await asyncio.wait_for(producer.flush(), 30)
    except PublishFailed as e:
        return e.errors[0][1]
    return None


async def read_all(b: BrokerProcess, stream: str, n: int) -> list[bytes]:
    async with await connect(b.host, b.port) as c:
        consumer = await c.consumer(stream, offset="first")
        got: list[bytes] = []

        async def run() -> None:
            async for m in consumer:
                got.append(m.body)
                if len(got) == n:
                    return

        await asyncio.wait_for(run(), 30)
        return got


async def test_a_roll_on_a_full_disk_leaves_the_stream_writable_once_space_is_freed(
        small_disk: Path, broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory()
    async with await connect(b.host, b.port) as c:
        # 1-byte segments: a segment rolls once it holds two chunks, so the third publish rolls
        await c.create_stream("s", {"stream-max-segment-size-bytes": "1"})
        producer = await c.producer("s")
        assert await publish(producer, b"a") is None
        assert await publish(producer, b"b") is None
        filler = fill(small_disk)
        for _ in range(3):  # the roll cannot create its segment: refused, nothing confirmed
            assert await publish(producer, b"lost") == Code.INTERNAL_ERROR
        filler.unlink()
        # space again: the same publisher (no restart, no new connection) is confirmed
        assert await publish(producer, b"c") is None
        assert await publish(producer, b"d") is None
        assert await publish(producer, b"e") is None
    assert await read_all(b, "s", 5) == [b"a", b"b", b"c", b"d", b"e"]
    b.restart()
    assert await read_all(b, "s", 5) == [b"a", b"b", b"c", b"d", b"e"]


async def test_refused_writes_on_a_full_disk_are_logged_a_few_times_not_once_each(
        small_disk: Path, broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory()
    async with await connect(b.host, b.port) as c:
        await c.create_stream("s")
        producer = await c.producer("s")
        assert await publish(producer, b"a") is None
        filler = fill(small_disk)
        # a message big enough to need a page the disk does not have: every flush is refused
        refused = 0
        for _ in range(200):
            if await publish(producer, b"x" * 8192) == Code.INTERNAL_ERROR:
                refused += 1
        assert refused == 200
        filler.unlink()
        assert await publish(producer, b"b") is None
    errors = [line for line in b.log_text().splitlines()
              if " ERROR " in line and "write failed" in line]
    assert 1 <= len(errors) <= 3, errors
    await eventually(lambda: "writes succeed again (after 200 like errors)" in b.log_text(),
                     what="the end of the refused writes logged")
    assert await read_all(b, "s", 2) == [b"a", b"b"]
