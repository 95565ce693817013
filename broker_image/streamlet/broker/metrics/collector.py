"""What /metrics says, read from the broker and its streams when scraped: the data path keeps
its own plain counters (core/streams.py, core/stats.py) and pays nothing for this.

Cardinality is bounded: per-stream series for at most ``max_streams`` streams and offset and
lag series for at most ``max_consumers`` named consumers, both taken in (vhost, name) order;
``streamlet_metrics_omitted`` says how many were left out. Totals (connections, publishers,
consumers, streams, the latency histogram) always count everything.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from itertools import accumulate, islice
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ...core.stats import LatencyHistogram
from ...native import survey

if TYPE_CHECKING:
    from ...core.streams import Stream
    from ..server import Broker

PREFIX = "streamlet_"
STREAM_LABELS = ["vhost", "stream"]


def lag(stream: Stream, stored: int) -> int:
    """Messages a named consumer has not processed: from the offset after its stored one (the
    last it processed, as RabbitMQ clients store it) to the last committed message. Offsets,
    so tracking chunks in between count too (one each), as in RabbitMQ's offset lag."""
    last = stream.committed_chunk_id
    if last < 0:
        return 0
    return max(stream.log.end_of(last) - 1 - stored, 0)


class BrokerCollector:
    """A prometheus_client custom collector over one broker."""

    def __init__(self, broker: Broker, max_streams: int, max_consumers: int) -> None:
        self.broker = broker
        self.max_streams = max_streams
        self.max_consumers = max_consumers

    def protocol(self, conn: object) -> str:
        return self.broker.protocol_names.get(type(conn), "other")

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        streams = sorted(((vhost, name, stream) for vhost, v in broker.vhosts.items()
                          for name, stream in v.streams.streams.items()), key=lambda t: t[:2])
        yield from self._clients(streams)
        yield from self._streams(streams)
        yield from self._replication(streams[: self.max_streams] if self.max_streams else [])
        yield self._latency()
        yield from self._disk()
        yield from self._reloads()
        yield from self._damage()
        yield self._native()

    def _clients(self, streams: list[tuple[str, str, Stream]]) -> Iterator[Metric]:
        protocols = sorted(set(self.broker.protocols) | {self.protocol(c) for c in
                                                           self.broker.connections})
        connections = Counter(self.protocol(c) for c in self.broker.connections)
        publishers: Counter[str] = Counter()
        consumers: Counter[str] = Counter()
        for _, _, stream in streams:
            publishers.update(self.protocol(p.conn) for p in stream.publishers)
            consumers.update(self.protocol(r.conn) for r in stream.subscriptions)
        for name, what, counts in (("connections", "Open client connections", connections),
                                   ("publishers", "Declared publishers", publishers),
                                   ("consumers", "Subscriptions (consumers)", consumers)):
            family = GaugeMetricFamily(PREFIX + name, f"{what}, by protocol", labels=["protocol"])
            for protocol in protocols:
                family.add_metric([protocol], counts[protocol])
            yield family
        total = GaugeMetricFamily(PREFIX + "streams", "Streams held by this broker (every "
                                  "replica counts), by virtual host", labels=["vhost"])
        for vhost, v in sorted(self.broker.vhosts.items()):
            total.add_metric([vhost], len(v.streams.streams))
        yield total

    def _streams(self, streams: list[tuple[str, str, Stream]]) -> Iterator[Metric]:
        listed = streams[: self.max_streams] if self.max_streams else []

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(PREFIX + name, doc, labels=STREAM_LABELS)

        def gauge(name: str, doc: str, labels: list[str] = STREAM_LABELS) -> GaugeMetricFamily:
            return GaugeMetricFamily(PREFIX + name, doc, labels=labels)

        m_in = counter("stream_messages_in", "Messages written by publishes since the broker "
                       "opened the stream")
        b_in = counter("stream_bytes_in", "Bytes of the messages written by publishes")
        m_out = counter("stream_messages_out", "Messages delivered to subscriptions")
        b_out = counter("stream_bytes_out", "Bytes of the chunks delivered to subscriptions")
        confirmed = counter("stream_confirmed", "Publishing ids confirmed (duplicates too)")
        chunk = gauge("stream_committed_chunk_id", "Id of the last committed chunk (-1: none)")
        committed = gauge("stream_committed_offset", "Last committed offset (-1: none)")
        first = gauge("stream_first_offset", "First offset still stored")
        segments = gauge("stream_segments", "Segment files on disk")
        size = gauge("stream_disk_bytes", "Bytes of the stream's segment files")
        writable = gauge("stream_writable", "1: this broker takes publishes for the stream (one "
                         "copy, or a replicated stream's leader); 0: sealed (moved, a follower, "
                         "fenced)")
        publishers = gauge("stream_publishers", "Publishers declared on the stream")
        consumers = gauge("stream_consumers", "Subscriptions of the stream")
        consumer_labels = [*STREAM_LABELS, "consumer"]
        offset = gauge("consumer_offset", "A named consumer's stored offset", consumer_labels)
        lags = gauge("consumer_lag", "Offsets a named consumer is behind the last committed "
                     "message", consumer_labels)
        room = self.max_consumers
        omitted_consumers = 0
        for vhost, name, stream in listed:
            labels = [vhost, name]
            m_in.add_metric(labels, stream.messages_in)
            b_in.add_metric(labels, stream.bytes_in)
            m_out.add_metric(labels, stream.messages_out)
            b_out.add_metric(labels, stream.bytes_out)
            confirmed.add_metric(labels, stream.confirmed)
            lg = stream.log
            chunk.add_metric(labels, stream.committed_chunk_id)
            committed.add_metric(labels, stream.commit_end - 1)
            first.add_metric(labels, lg.first_offset)
            segments.add_metric(labels, lg.segment_count)
            size.add_metric(labels, lg.size_bytes)
            writable.add_metric(labels, 0 if stream.sealed or stream.deleted else 1)
            publishers.add_metric(labels, len(stream.publishers))
            consumers.add_metric(labels, len(stream.subscriptions))
            stored = lg.offsets
            for reference, value in islice(stored.items(), max(room, 0)):
                offset.add_metric([*labels, reference], value)
                lags.add_metric([*labels, reference], lag(stream, value))
            omitted_consumers += max(len(stored) - max(room, 0), 0)
            room -= len(stored)
        omitted_consumers += sum(len(s.log.offsets) for _, _, s in streams[len(listed):])
        yield from (m_in, b_in, m_out, b_out, confirmed, chunk, committed, first, segments, size,
                    writable, publishers, consumers, offset, lags)
        omitted = GaugeMetricFamily(PREFIX + "metrics_omitted", "Streams and named consumers "
                                    "left out of the per-stream series (listeners.metrics "
                                    "max_streams, max_consumers)", labels=["kind"])
        omitted.add_metric(["streams"], len(streams) - len(listed))
        omitted.add_metric(["consumers"], omitted_consumers)
        yield omitted

    def _replication(self, listed: list[tuple[str, str, Stream]]) -> Iterator[Metric]:
        """Replicated streams: what every member knows (epoch, members, role, its counts) and
        what only the leader does (in-sync members, each follower's lag by its acks)."""

        def gauge(name: str, doc: str, labels: list[str] = STREAM_LABELS) -> GaugeMetricFamily:
            return GaugeMetricFamily(PREFIX + "replication_" + name, doc, labels=labels)

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(PREFIX + "replication_" + name, doc, labels=STREAM_LABELS)

        member_labels = [*STREAM_LABELS, "member"]
        epoch = gauge("epoch", "The epoch this member is in")
        members = gauge("members", "Members of the stream in this member's "
                         "epoch (learners being added not counted)")
        leader = gauge("leader", "1: this member leads the stream; 0: it "
                        "follows or is fenced")
        in_sync = gauge("in_sync_members", "Members in sync, the leader included (reported "
                        "by the leader only): a follower is while its link is up and it held "
                        "everything the leader had written 10 s before")
        follower_in_sync = gauge("follower_in_sync", "1: the follower is in sync (reported by "
                                 "the leader)", member_labels)
        lag_offsets = gauge("follower_lag_offsets", "Offsets of the leader's log past the "
                            "follower's last ack (reported by the leader; a learner being "
                            "added too)", member_labels)
        lag_chunks = gauge("follower_lag_chunks", "Chunks of the leader's log past the "
                           "follower's last ack", member_labels)
        lag_bytes = gauge("follower_lag_bytes", "Bytes of the leader's log (as its segment "
                          "files hold them) past the follower's last ack", member_labels)
        elections = counter("elections", "Epochs this broker was assigned to lead the stream "
                            "(a member set change's new epoch too)")
        changes = counter("membership_changes", "Assigns this member took whose member set "
                          "differs from the one before")
        for vhost, name, stream in listed:
            member = self.broker.members.get(stream)
            if member is None:
                continue
            labels = [vhost, name]
            state = member.state
            epoch.add_metric(labels, state.epoch)
            members.add_metric(labels, len(state.members))
            leader.add_metric(labels, 1 if member.leader is not None else 0)
            elections.add_metric(labels, member.elections)
            changes.add_metric(labels, member.membership_changes)
            lead = member.leader
            if lead is None or lead.stopped:
                continue
            in_sync.add_metric(labels, sum(lead.in_sync(m) for m in lead.members))
            for m in sorted(set(lead.members) | set(lead.progress)):
                if m == lead.me:
                    continue
                each = [*labels, str(m)]
                if m in lead.members:  # a learner is in no member count
                    follower_in_sync.add_metric(each, 1 if lead.in_sync(m) else 0)
                behind = lead.lag(m)
                if behind is not None:
                    lag_offsets.add_metric(each, behind[0])
                    lag_chunks.add_metric(each, behind[1])
                    lag_bytes.add_metric(each, behind[2])
        yield from (epoch, members, leader, in_sync, follower_in_sync, lag_offsets, lag_chunks,
                    lag_bytes, elections, changes)

    def _latency(self) -> Metric:
        """Every vhost's histogram, summed (each Streams keeps one for all its streams)."""
        parts: list[LatencyHistogram] = [v.streams.confirm_latency
                                         for v in self.broker.vhosts.values()]
        bounds = parts[0].bounds
        counts = [sum(p.counts[i] for p in parts) for i in range(len(bounds) + 1)]
        cumulative = list(accumulate(counts))
        buckets = [(repr(float(b)), c) for b, c in zip(bounds, cumulative, strict=False)]
        buckets.append(("+Inf", cumulative[-1]))
        return HistogramMetricFamily(
            PREFIX + "publish_confirm_seconds", "Publish to confirm, per chunk: from the first "
            "publish a chunk took to its confirm (the longest wait of its messages)",
            buckets=buckets, sum_value=sum(p.total for p in parts))

    def _disk(self) -> Iterator[Metric]:
        try:
            st = os.statvfs(self.broker.config.data_dir)
        except OSError:
            return
        free = GaugeMetricFamily(PREFIX + "disk_free_bytes", "Bytes available to the broker on "
                                 "the data directory's file system")
        free.add_metric([], st.f_bavail * st.f_frsize)
        total = GaugeMetricFamily(PREFIX + "disk_size_bytes",
                                  "Size of the data directory's file system")
        total.add_metric([], st.f_blocks * st.f_frsize)
        yield free
        yield total

    def _reloads(self) -> Iterator[Metric]:
        """The users file's and the TLS certificate's reloads (broker/reload.py), by ``what``."""
        failures = CounterMetricFamily(PREFIX + "reload_failures", "Reloads of a changed users "
                                       "file or TLS certificate that failed (the old one stays "
                                       "in force)", labels=["what"])
        for what, count in sorted(self.broker.reload_failures.items()):
            failures.add_metric([what], count)
        last = GaugeMetricFamily(PREFIX + "reload_last_success_timestamp_seconds", "When the "
                                 "users file or TLS certificate in force was loaded (Unix time)",
                                 labels=["what"])
        for what, at in sorted(self.broker.reloaded_at.items()):
            last.add_metric([what], at)
        yield failures
        yield last

    def _native(self) -> Metric:
        """Which optional C extensions this process runs (1) or runs the Python twin of (0)."""
        family = GaugeMetricFamily(PREFIX + "native_extensions", "1: the C extension is loaded; "
                                   "0: its Python twin runs instead (slower: not built, or "
                                   "turned off by STREAMLET_NO_C)", labels=["module"])
        for module, ok in survey().items():
            family.add_metric([module], 1 if ok else 0)
        return family

    def _damage(self) -> Iterator[Metric]:
        """Streams set aside at start (unreadable), two leaders seen in one epoch, and a
        deposed placement driver's requests refused."""
        broker = self.broker
        unreadable = GaugeMetricFamily(PREFIX + "streams_unreadable", "Stream directories set "
                                       "aside at start because their stream.json or "
                                       "replication.json could not be read (not served; the "
                                       "broker's log names each and why)", labels=["vhost"])
        for vhost, v in sorted(broker.vhosts.items()):
            unreadable.add_metric([vhost], len(v.streams.unreadable))
        yield unreadable
        split = CounterMetricFamily(PREFIX + "replication_split_brain", "Times this member saw "
                                    "two leaders in one epoch of the stream (an Assign, "
                                    "ReplicaHello or SacJoin naming another leader than the "
                                    "one it knows)", labels=STREAM_LABELS)
        for vhost, v in sorted(broker.vhosts.items()):
            for name, stream in sorted(v.streams.streams.items()):
                member = broker.members.get(stream)
                if member is not None and member.two_leaders is not None:
                    split.add_metric([vhost, name], member.two_leaders.count)
        yield split
        fenced = CounterMetricFamily(PREFIX + "driver_requests_fenced", "Placement driver "
                                     "requests refused for a fencing token below the highest "
                                     "seen (a deposed operator leader's), by command",
                                     labels=["command"])
        for command, count in sorted(broker.driver_fencing.refused.items()):
            fenced.add_metric([command], count)
        yield fenced
        token = GaugeMetricFamily(PREFIX + "driver_fencing_token", "The highest placement "
                                  "driver fencing token seen (0: none)")
        token.add_metric([], broker.driver_fencing.highest)
        yield token
