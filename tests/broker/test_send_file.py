"""FramedConnection.send_file on a real loopback socket (an in-process broker's connection):
what the socket does not take of a file part is not read whole into the transport: the
connection pauses until its piece is written, sends the rest from the file, and resumes; a
write meanwhile comes after the whole part."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamlet.broker.protocols import LISTENERS, load
from streamlet.broker.server import Broker
from streamlet.broker.transport import FILE_PIECE, FramedConnection
from tests.support.brokers import free_port
from tests.support.waiting import eventually


@pytest.fixture
async def linked(tmp_path: Path) -> AsyncIterator[tuple[FramedConnection, socket.socket]]:
    """A broker connection whose socket sends 8 KiB at a time, and its peer's socket."""
    broker = Broker(load(None, data_dir=str(tmp_path / "data"), port=free_port()), LISTENERS)
    await broker.start()
    peer = socket.socket()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peer.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(peer, ("127.0.0.1", broker.config.port))
        conn = await eventually(lambda: next(iter(broker.connections), None),
                                what="the broker's connection")
        assert conn.transport is not None
        conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF,
                                                           8192)
        yield conn, peer
    finally:
        peer.close()
        await broker.stop()


async def _read(peer: socket.socket, n: int) -> bytes:
    got = bytearray()
    loop = asyncio.get_running_loop()
    while len(got) < n:
        data = await asyncio.wait_for(loop.sock_recv(peer, 1 << 16), 30)
        assert data, "the connection closed"
        got += data
    return bytes(got)


async def test_a_full_socket_pauses_and_the_rest_goes_from_the_file(
        linked: tuple[FramedConnection, socket.socket], tmp_path: Path) -> None:
    conn, peer = linked
    body = os.urandom(40 * FILE_PIECE + 123)
    path = tmp_path / "file"
    path.write_bytes(b"skip" + body + b"tail")
    resumed: list[bool] = []
    conn.writable = lambda: resumed.append(True)  # type: ignore[method-assign]
    fd = os.open(path, os.O_RDONLY)
    try:
        assert conn.can_send_file()
        conn.send_file(b"head", fd, 4, len(body))
    finally:
        os.close(fd)  # the rest is kept on a descriptor of its own
    assert conn.paused and not conn.can_send_file(), "the socket is full: held"
    assert conn.transport is not None
    assert conn.transport.get_write_buffer_size() <= FILE_PIECE, "a piece read, not the rest"
    conn.write(b"after")  # comes after the whole part, whatever is still held
    got = await _read(peer, 4 + len(body) + 5)
    assert got == b"head" + body + b"after"
    await eventually(lambda: not conn.paused, what="the connection resumed")
    assert conn.can_send_file()


async def test_the_part_held_goes_on_from_the_file_until_sent(
        linked: tuple[FramedConnection, socket.socket], tmp_path: Path) -> None:
    conn, peer = linked
    body = os.urandom(20 * FILE_PIECE)
    path = tmp_path / "file"
    path.write_bytes(body)
    resumed: list[bool] = []
    conn.writable = lambda: resumed.append(True)  # type: ignore[method-assign]
    fd = os.open(path, os.O_RDONLY)
    try:
        conn.send_file(b"", fd, 0, len(body))
    finally:
        os.close(fd)
    assert conn.paused
    assert await _read(peer, len(body)) == body
    await eventually(lambda: resumed, what="writable once all was sent")
    assert not conn.paused and conn.transport is not None
    assert conn.transport.get_write_buffer_size() == 0
