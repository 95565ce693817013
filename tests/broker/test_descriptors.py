"""Hardening: file descriptors are bounded and a broker restarts on whatever a
client made it store; a segment roll on a full disk leaves the stream writable once space is
freed, and refused writes do not flood the log."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from streamlet.client import StreamletError, connect
from streamlet.client.producer import Producer, PublishFailed
from streamlet.rabbitmq import Code
from tests.support.brokers import BrokerProcess
from tests.support.reading import stream_bodies
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

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
    assert await stream_bodies(b, "s", 5) == [b"a", b"b", b"c", b"d", b"e"]
    b.restart()
    assert await stream_bodies(b, "s", 5) == [b"a", b"b", b"c", b"d", b"e"]


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
    assert await stream_bodies(b, "s", 2) == [b"a", b"b"]


# --- limits on streams and descriptors ---------------------------------------------------------


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "limits.toml"
    path.write_text(text)
    return path


async def _code(request: Awaitable[None]) -> int:
    try:
        await request
    except StreamletError as e:
        return int(e.code)
    return int(Code.OK)


async def test_streams_and_partitions_past_the_limits_answer_17_and_the_broker_restarts(
        tmp_path: Path, broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(config=_config(tmp_path, "[limits]\nmax_streams = 8\nmax_partitions = 5\n"))
    async with await connect(b.host, b.port) as c:
        six = [f"big-{i}" for i in range(6)]
        assert await _code(c.create_super_stream("big", six, six)) == Code.PRECONDITION_FAILED
        five = [f"ss-{i}" for i in range(5)]
        assert await _code(c.create_super_stream("ss", five, five)) == Code.OK
        for i in range(3):
            assert await _code(c.create_stream(f"s{i}")) == Code.OK
        # 8 streams, partitions included: one more is refused, a stream or a partition
        assert await _code(c.create_stream("s3")) == Code.PRECONDITION_FAILED
        two = ["more-0", "more-1"]
        assert await _code(c.create_super_stream("more", two, two)) == Code.PRECONDITION_FAILED
        for name in ("s3", *six, *two):
            assert not await c.stream_exists(name)
        await c.delete_stream("s2")
        assert await _code(c.create_stream("s3")) == Code.OK
    log = b.log_text()
    assert "limits.max_streams is 8" in log and "limits.max_partitions is 5" in log
    b.restart()
    async with await connect(b.host, b.port) as c:
        for name in (*five, "s0", "s1", "s3"):
            assert await c.stream_exists(name)
        assert await c.partitions("ss") == five
        assert await _code(c.create_stream("s4")) == Code.PRECONDITION_FAILED


async def test_streams_are_refused_before_descriptors_run_out_and_the_broker_restarts(
        tmp_path: Path, broker_factory: Callable[..., BrokerProcess]) -> None:
    cfg = _config(tmp_path, "[limits]\nmax_streams = 0\nmax_partitions = 0\n"
                  "[storage]\nmax_open_files = 16\n")
    b = broker_factory(config=cfg, nofile=200)
    async with await connect(b.host, b.port) as c:
        many = [f"p-{i}" for i in range(100)]  # 300 descriptors: more than there are
        assert await _code(c.create_super_stream("many", many, many)) == Code.PRECONDITION_FAILED
        assert not await c.stream_exists("p-0")
        created = 0
        while await _code(c.create_stream(f"s{created}")) == Code.OK:
            created += 1
            assert created < 100
        assert created >= 20
        assert b.open_fds() <= 200 - 16  # the file cache's room is left
        producer = await c.producer("s0")
        assert await publish(producer, b"still writable") is None
    b.restart()
    assert await stream_bodies(b, "s0", 1) == [b"still writable"]
    async with await connect(b.host, b.port) as c:
        assert await c.stream_exists(f"s{created - 1}")


async def test_a_stream_of_thousands_of_segments_keeps_few_descriptors_open(
        tmp_path: Path, broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(config=_config(tmp_path, "[storage]\nmax_open_files = 16\n"))
    n = 2000
    async with await connect(b.host, b.port) as c:
        await c.create_stream("s", {"stream-max-segment-size-bytes": "1"})
        base = b.open_fds()
        producer = await c.producer("s", reference="p")  # a snapshot in every segment
        for i in range(n):  # one chunk each: a segment each
            assert await publish(producer, b"m%d" % i) is None
        assert b.open_fds() <= base + 8
    segments = len(list((b.data_dir / "streams" / "s").glob("*.segment")))
    assert segments >= n - 1  # the first segment holds two user chunks (no snapshot yet)
    bodies = [b"m%d" % i for i in range(n)]
    assert await stream_bodies(b, "s", n) == bodies
    assert b.open_fds() <= base + 16 + 8
    b.restart()
    base = b.open_fds()
    assert await stream_bodies(b, "s", n) == bodies
    assert b.open_fds() <= base + 16 + 8
