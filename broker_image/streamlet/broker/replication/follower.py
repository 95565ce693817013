"""A follower's link to its leader: connect, authenticate (the client's handshake machine), say
ReplicaHello with this member's tail, truncate to the leader's epoch vector, ReplicaStart, then
write the chunks the leader pushes (checked, byte for byte), ack each run, and commit what the
leader says is committed. A broken link is retried with a backoff until the member is fenced
or assigned elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from typing import TypeVar

from ...core.streams import Stream
from ...protocol import Code
from ...protocol import frames as f
from ...rabbitmq.client import ClientHandshake
from ..directory import Address

log = logging.getLogger("streamlet.broker")

_SIZE = struct.Struct(">I")
#: the largest frame a leader sends (a run of chunks: FEED_BYTES, or one chunk of up to 4 MiB+)
MAX_FRAME = 64 << 20
BACKOFF_S = (0.1, 2.0)


class LinkRefused(Exception):
    """The leader refused this member (another epoch, or a log it cannot continue)."""


class Follower:
    def __init__(self, stream: Stream, epoch: int, me: int, leader: Address,
                 credentials: tuple[str, str]) -> None:
        self.stream = stream
        self.epoch = epoch
        self.me = me
        self.leader = leader
        self.credentials = credentials
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.connected = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    async def _run(self) -> None:
        backoff = BACKOFF_S[0]
        while True:
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the link's problem; the member retries
                log.info("stream %s: link to leader %s:%d (epoch %d) lost: %s", self.stream.name,
                         *self.leader, self.epoch, e)
            finally:
                self.connected = False
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, BACKOFF_S[1])

    async def _follow(self) -> None:
        reader, writer = await asyncio.open_connection(*self.leader)
        self._writer = writer
        try:
            await self._handshake(reader, writer)
            lg, stream = self.stream.log, self.stream
            tail = lg.tail()
            writer.write(f.encode(f.ReplicaHello(2, stream.name, self.epoch, self.me, *tail)))
            hello = await _answer(reader, f.ReplicaHelloResponse)
            if hello.code != Code.OK or hello.epoch != self.epoch:
                raise LinkRefused(f"hello: code {hello.code}, leader epoch {hello.epoch}")
            lg.truncate_to(hello.epochs, hello.first_offset)
            tail = lg.tail()
            writer.write(f.encode(f.ReplicaStart(3, self.epoch, *tail)))
            started = await _answer(reader, f.ReplicaStartResponse)
            if started.code != Code.OK:
                raise LinkRefused(f"start: code {started.code}")
            self.connected = True
            log.info("stream %s: following %s:%d in epoch %d from offset %d", stream.name,
                     *self.leader, self.epoch, tail[2])
            writer.write(f.encode(f.ReplicaAck(self.epoch, tail[1], tail[2])))
            while True:
                cmd = f.decode(await _frame(reader))
                if isinstance(cmd, f.ReplicaChunks):
                    if cmd.epoch != self.epoch:
                        raise LinkRefused(f"chunks of epoch {cmd.epoch}")
                    lg.accept_chunks(cmd.chunks)
                    stream.appended()
                    _, last, end = lg.tail()
                    writer.write(f.encode(f.ReplicaAck(self.epoch, last, end)))
                    self._commit(cmd.committed_chunk_id)
                elif isinstance(cmd, f.ReplicaCommit):
                    self._commit(cmd.committed_chunk_id)
                elif isinstance(cmd, f.Close):
                    raise LinkRefused(f"closed by the leader: {cmd.reason} (code {cmd.code})")
                elif isinstance(cmd, f.FrameError):
                    raise LinkRefused(f"bad frame from the leader: {cmd.reason}")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _commit(self, chunk_id: int) -> None:
        """The leader committed up to ``chunk_id``: this log is a prefix of the leader's, so
        every chunk here up to it is committed."""
        if chunk_id >= 0:
            self.stream.commit(self.stream.log.end_of(chunk_id))

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        user, password = self.credentials
        hs = ClientHandshake(properties={"product": "streamlet", "connection_name": "replication"},
                             user=user, password=password, heartbeat=None)
        for cmd in hs.start():
            writer.write(f.encode(cmd))
        while hs.opened is None:
            for cmd in hs.receive_frame(await _frame(reader)):
                writer.write(f.encode(cmd))


async def _frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    if size > MAX_FRAME:
        raise LinkRefused(f"a frame of {size} bytes")
    return await reader.readexactly(size)


_T = TypeVar("_T", bound=f.Command)


async def _answer(reader: asyncio.StreamReader, kind: type[_T]) -> _T:
    """The next frame, which must be ``kind`` (a Heartbeat is skipped)."""
    while True:
        cmd = f.decode(await _frame(reader))
        if isinstance(cmd, f.Heartbeat):
            continue
        if not isinstance(cmd, kind):
            raise LinkRefused(f"expected {kind.__name__}, got {type(cmd).__name__}")
        return cmd
