"""A follower's link to its leader: connect, authenticate (the client's handshake machine), say
ReplicaHello with this member's tail, truncate to the leader's epoch vector, ReplicaStart, then
write the chunks the leader pushes (checked, byte for byte), ack each run, and commit what the
leader says is committed. A broken link is retried with a backoff until the member is fenced
or assigned elsewhere.
"""

from __future__ import annotations

import asyncio
import logging

from ...core.streams import Stream
from ...rabbitmq import Code
from ...rabbitmq import frames as f
from ...rabbitmq.frames import replication as rf
from ..directory import Address
from .peer import PeerLogin, open_buffered_peer

log = logging.getLogger("streamlet.broker")

BACKOFF_S = (0.1, 2.0)


class LinkRefused(Exception):
    """The leader refused this member (another epoch, or a log it cannot continue)."""


class Follower:
    def __init__(self, stream: Stream, epoch: int, me: int, leader: Address,
                 credentials: PeerLogin) -> None:
        self.stream = stream
        self.epoch = epoch
        self.me = me
        self.leader = leader
        self.credentials = credentials
        self._task: asyncio.Task[None] | None = None
        self.connected = False
        self.heard_at = 0.0  # loop time of the leader's last frame on the link
        self.started_at = 0.0  # loop time of start()
        #: the commit point (chunk id) the leader last sent; None: none heard yet
        self.leader_committed: int | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.started_at = loop.time()
        self._task = loop.create_task(self._run())

    def silence(self) -> float:
        """Seconds since the leader was last heard from, or since this follower started when
        it never was (readiness: a leader unreachable this long holds nothing back)."""
        return asyncio.get_running_loop().time() - max(self.heard_at, self.started_at)

    def caught_up(self) -> bool:
        """Whether this log holds every chunk the leader last said was committed."""
        return (self.leader_committed is not None
                and self.stream.log.tail()[1] >= self.leader_committed)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()  # its connection is closed as the task ends
            self._task = None

    def contact_age(self) -> float | None:
        """Seconds since the leader was last heard from on a working link; None: no link.
        An idle leader sends a ReplicaCommit every HEARTBEAT_S (leader.py), so a stopped one
        ages here even while its TCP connection stays up."""
        if not self.connected:
            return None
        return asyncio.get_running_loop().time() - self.heard_at

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
        async with open_buffered_peer(self.leader, self.credentials) as peer:
            lg, stream = self.stream.log, self.stream
            hello = await peer.request(rf.ReplicaHello(peer.next_corr(), stream.name, self.epoch,
                                                      self.me, *lg.tail()), rf.ReplicaHelloResponse)
            if hello.code != Code.OK or hello.epoch != self.epoch:
                raise LinkRefused(f"hello: code {hello.code}, leader epoch {hello.epoch}")
            lg.truncate_to(hello.epochs, hello.first_offset)
            tail = lg.tail()
            started = await peer.request(rf.ReplicaStart(peer.next_corr(), self.epoch, *tail),
                                         rf.ReplicaStartResponse)
            if started.code != Code.OK:
                raise LinkRefused(f"start: code {started.code}")
            loop = asyncio.get_running_loop()
            self.heard_at = loop.time()
            self.connected = True
            log.info("stream %s: following %s:%d in epoch %d from offset %d", stream.name,
                     *self.leader, self.epoch, tail[2])
            peer.send(rf.ReplicaAck(self.epoch, tail[1], tail[2]))
            while True:
                # a view of the link's buffer: the chunks are checked and written from it
                cmd = f.decode(await peer.frame_view())
                self.heard_at = loop.time()
                if isinstance(cmd, rf.ReplicaChunks):
                    if cmd.epoch != self.epoch:
                        raise LinkRefused(f"chunks of epoch {cmd.epoch}")
                    lg.accept_chunks(cmd.chunks)
                    stream.appended()
                    _, last, end = lg.tail()
                    peer.send(rf.ReplicaAck(self.epoch, last, end))
                    self._commit(cmd.committed_chunk_id)
                elif isinstance(cmd, rf.ReplicaCommit):
                    self._commit(cmd.committed_chunk_id)
                elif isinstance(cmd, f.Close):
                    raise LinkRefused(f"closed by the leader: {cmd.reason} (code {cmd.code})")
                elif isinstance(cmd, f.FrameError):
                    raise LinkRefused(f"bad frame from the leader: {cmd.reason}")

    def _commit(self, chunk_id: int) -> None:
        """The leader committed up to ``chunk_id``: this log is a prefix of the leader's, so
        every chunk here up to it is committed."""
        self.leader_committed = chunk_id
        if chunk_id >= 0:
            self.stream.commit(self.stream.log.end_of(chunk_id))
