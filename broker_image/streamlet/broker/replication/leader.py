"""A replicated stream's leader: it feeds each follower the chunks it writes, counts their acks
and moves the stream's commit point by the pure commit rule (streamlet.replication.commit).

A follower's link arrives as a connection that sent ReplicaHello and ReplicaStart; from then on a
``Feed`` pushes whole chunks (every type, bloom and trailer included) to it as soon as they are
written (Stream.when_written), as much as the connection's write room allows, each run one
ReplicaChunks frame: its head, then the run's bytes sent from the segment file (sendfile over
plain TCP; FramedConnection.write_file). The connection's own back-pressure resumes it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from ...core.streams import Stream
from ...rabbitmq.frames import encode
from ...rabbitmq.frames.replication import ReplicaChunks, ReplicaCommit
from ...replication.commit import committed
from ...replication.model import EpochAck

log = logging.getLogger("streamlet.broker")

#: Bytes of chunks one ReplicaChunks frame carries at most (one sendfile or pread).
FEED_BYTES = 1 << 20
#: An idle feed gets a ReplicaCommit this often: followers tell the placement driver how long
#: ago they heard from their leader (ReplicaContact), which a stopped leader makes grow.
HEARTBEAT_S = 0.5
#: A follower is in sync while its link is up and it holds, or held at most this long ago,
#: everything the leader had written at some earlier look (what /metrics reports, no rule).
IN_SYNC_S = 10.0


class FollowerConnection(Protocol):
    """The connection a follower's link arrived on (the RabbitMQ adapter's)."""

    closing: bool

    def write_room(self) -> int: ...

    def write(self, data: bytes) -> None: ...

    def write_file(self, head: bytes, fd: int, pos: int, size: int) -> None: ...


@dataclass
class Progress:
    """What the leader knows of one member's copy, for /metrics: its last ack (``chunk_id``,
    ``next_offset``: -1 until one came), and since when it is known to have caught up
    (``caught_up_at``): an ack at or past ``mark_id`` (the leader's tail when ``mark_at``)
    says it held everything the leader had then."""

    caught_up_at: float
    mark_id: int
    mark_at: float
    chunk_id: int = -1
    next_offset: int = -1

    def acked(self, chunk_id: int, next_offset: int, tail_id: int, now: float) -> None:
        self.chunk_id, self.next_offset = chunk_id, next_offset
        if chunk_id >= tail_id:  # it holds everything now
            self.caught_up_at = self.mark_at = now
            self.mark_id = tail_id
        elif chunk_id >= self.mark_id:
            self.caught_up_at = self.mark_at
            self.mark_id, self.mark_at = tail_id, now


class Leader:
    """The leader's side of one stream in one epoch."""

    def __init__(self, stream: Stream, epoch: int, me: int, members: tuple[int, ...]) -> None:
        self.stream = stream
        self.epoch = epoch
        self.me = me
        self.members = members
        self.acks: dict[int, EpochAck] = {}
        self.ends: dict[int, int] = {}  # chunk id -> its end offset, for the tails seen
        self.feeds: dict[int, Feed] = {}  # by member
        self.epoch_start: int | None = None
        self.committed_id = -1
        self.stopped = False
        #: each other member's progress, and each learner's once its link started (read by
        #: /metrics, never by the commit)
        self.progress: dict[int, Progress] = {}

    def start(self) -> None:
        """Open the epoch: its first chunk (a tracking snapshot) is what the commit waits for.
        Confirms wait for the commit from now on."""
        stream = self.stream
        stream.flush()
        # Deduplication goes on from the log: a follower's took the old leader's writer
        # sequences with its chunks (uncommitted ones too: a leader never truncates itself).
        stream.sequences = dict(stream.log.writer_sequences)
        stream.awaits_commit = len(self.members) > 1
        ref = stream.log.open_epoch(self.epoch)
        self.epoch_start = ref.chunk_id
        now = stream.clock.time()
        self.progress = {m: Progress(now, ref.chunk_id, now) for m in self.members
                         if m != self.me}
        stream.appended()  # the feeds send it
        self.recompute()
        stream.clock.call_later(HEARTBEAT_S, self._beat)

    def _beat(self) -> None:
        if self.stopped:
            return
        for feed in self.feeds.values():
            feed.beat()
        self.stream.clock.call_later(HEARTBEAT_S, self._beat)

    def stop(self) -> None:
        """Fenced or deposed: no more feeds, no more commits in this epoch."""
        self.stopped = True
        for feed in self.feeds.values():
            feed.stopped = True
        self.feeds.clear()

    def attach(self, member: int, conn: FollowerConnection, start: int) -> Feed:
        old = self.feeds.pop(member, None)
        if old is not None:
            old.stopped = True
        feed = Feed(self, conn, start)
        self.feeds[member] = feed
        if member not in self.progress and member != self.me:  # a learner: its lag is shown
            now = self.stream.clock.time()
            self.progress[member] = Progress(now, self.stream.log.tail()[1], now)
        return feed  # the caller answers ReplicaStart, then pumps

    def detach(self, conn: FollowerConnection) -> None:
        for member, feed in list(self.feeds.items()):
            if feed.conn is conn:
                feed.stopped = True
                del self.feeds[member]
                if member not in self.members:
                    self.progress.pop(member, None)  # a learner's link gone: no stale lag

    def on_ack(self, member: int, epoch: int, chunk_id: int, next_offset: int) -> None:
        if self.stopped or epoch != self.epoch:
            return  # another epoch's: never counted
        progress = self.progress.get(member)
        if progress is not None:  # a learner's too: shown, not counted
            progress.acked(chunk_id, next_offset, self.stream.log.tail()[1],
                           self.stream.clock.time())
        if member not in self.members:
            return  # not a member's: never counted
        self.acks[member] = EpochAck(member, epoch, chunk_id)
        self.ends[chunk_id] = next_offset
        self.recompute()

    def in_sync(self, member: int) -> bool:
        """Whether ``member`` is in sync (IN_SYNC_S); the leader itself always is."""
        if member == self.me:
            return True
        progress, feed = self.progress.get(member), self.feeds.get(member)
        if progress is None or feed is None or feed.stopped or feed.conn.closing:
            return False
        return (progress.chunk_id >= self.stream.log.tail()[1]
                or self.stream.clock.time() - progress.caught_up_at <= IN_SYNC_S)

    def lag(self, member: int) -> tuple[int, int, int] | None:
        """How far ``member``'s copy is behind by its last ack (before one, where its feed
        started): offsets, chunks and bytes of the leader's log; None when not known."""
        progress, feed = self.progress.get(member), self.feeds.get(member)
        if progress is None:
            return None
        start = progress.next_offset
        if start < 0:
            if feed is None:
                return None
            start = feed.start
        lg = self.stream.log
        chunks, size = lg.span_from(start)
        return max(lg.next_offset - start, 0), chunks, size

    def recompute(self) -> None:
        if self.stopped:
            return
        lg = self.stream.log
        _, tail_id, tail_end = lg.tail()
        self.ends[tail_id] = tail_end
        now = committed(self.epoch, self.me, tail_id, list(self.acks.values()), self.members,
                        self.epoch_start, self.committed_id)
        if now > self.committed_id:
            self.committed_id = now
            end = self.ends[now]
            self.ends = {c: e for c, e in self.ends.items() if c >= now}
            self.stream.commit(end)
            for feed in self.feeds.values():
                feed.commit_moved()


class Feed:
    """Chunks from ``next`` on to one follower's connection."""

    def __init__(self, leader: Leader, conn: FollowerConnection, start: int) -> None:
        self.leader = leader
        self.conn = conn
        self.start = start  # the follower's next offset when its link started
        self.next = start
        self.sent_commit = -1
        self.stopped = False
        self._idle = False  # everything written was sent
        self._registered = False  # a when_written callback is pending

    def pump(self) -> None:
        stream, lead = self.leader.stream, self.leader
        if self.stopped or self.conn.closing or stream.deleted:
            return  # deleted: when_written would call back at once, for ever
        while self.conn.write_room() > 0:
            run = stream.log.raw_run(self.next, FEED_BYTES)
            if run is None:
                self._idle = True
                if not self._registered:
                    self._registered = True
                    stream.when_written(self.next, self._on_written)
                return
            self._idle = False
            head = ReplicaChunks.prefix(lead.epoch, lead.committed_id, run.size)
            self.conn.write_file(head, run.fd, run.pos, run.size)  # sendfile when it can
            self.sent_commit = lead.committed_id
            self.next = run.refs[-1].next_offset

    def _on_written(self) -> None:
        self._registered = False
        self.pump()

    def beat(self) -> None:
        """The commit point again while no chunks flow: the follower hears we are alive."""
        lead = self.leader
        if self._idle and not self.stopped and not self.conn.closing:
            self.sent_commit = lead.committed_id
            self.conn.write(encode(ReplicaCommit(lead.epoch, lead.committed_id)))

    def commit_moved(self) -> None:
        """Chunks carry the commit; when none are flowing, a ReplicaCommit does."""
        lead = self.leader
        if self._idle and not self.stopped and lead.committed_id > self.sent_commit:
            self.sent_commit = lead.committed_id
            self.conn.write(encode(ReplicaCommit(lead.epoch, lead.committed_id)))
