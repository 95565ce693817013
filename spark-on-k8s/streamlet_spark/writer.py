"""Batch and streaming writes with deterministic publishing ids.

Each Spark task publishes under the reference ``<publisherReference>-<task partition>``; the
broker keeps the highest publishing id per reference and drops anything at or below it. Row i
of the task gets id ``base + i + 1``, with ``base`` 0 for a batch write and ``batchId << 32``
for a micro-batch: a retried task or a replayed micro-batch sends the same rows with the same
ids, and nothing is stored twice. Ids already stored are not even sent again."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from streamlet.client import Client, Producer, StreamletError
from streamlet.rabbitmq import Code

from . import broker
from .options import Options

BATCH_SHIFT = 32  # room for 4 billion rows per task and micro-batch


@dataclass
class Published(WriterCommitMessage):  # type: ignore[misc]
    partition: int
    sent: int
    skipped: int


def task_reference(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


def _bodies(batch: pa.RecordBatch) -> list[bytes]:
    if "value" not in batch.schema.names:
        raise ValueError("the streamlet sink needs a column named value (binary or string)")
    col = batch.column("value")
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return [s.encode("utf-8") for s in col.to_pylist()]
    return col.to_pylist()


def _targets(batch: pa.RecordBatch, streams: list[str]) -> list[str]:
    """The partition stream of each row of a super stream write: the ``stream`` column, else
    ``partition`` as an index into the super stream's partitions."""
    if "stream" in batch.schema.names:
        return [str(s) for s in batch.column("stream").to_pylist()]
    if "partition" in batch.schema.names:
        return [streams[int(p)] for p in batch.column("partition").to_pylist()]
    raise ValueError("a superStream write needs a stream or a partition column")


def publish(opts: Options, batches: Iterator[pa.RecordBatch], base: int) -> Published:
    """Publish every row, in order, with ids ``base + 1, base + 2...`` per target stream."""
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    reference = (task_reference(opts.publisher_reference, partition)
                 if opts.publisher_reference else None)
    producers: dict[str, Producer] = {}
    counts: dict[str, int] = {}  # rows seen per target stream
    sent = skipped = 0

    async def producer(stream: str) -> Producer:
        if stream not in producers:
            producers[stream] = await client.producer(stream, reference=reference,
                                                      batch_size=500, max_unconfirmed=50000)
        return producers[stream]

    async def send(stream: str, bodies: list[bytes]) -> None:
        nonlocal sent, skipped
        p = await producer(stream)
        first = base + counts.get(stream, 0) + 1
        counts[stream] = counts.get(stream, 0) + len(bodies)
        if reference is not None:
            stored = p.next_publishing_id - 1  # highest id the broker has for this reference
            drop = min(max(stored - first + 1, 0), len(bodies))
            skipped += drop
            bodies, first = bodies[drop:], first + drop
        if not bodies:
            return
        await p.send(bodies[0], publishing_id=first)  # moves the producer's sequence here
        await p.send_many(bodies[1:])
        sent += len(bodies)

    with broker.session(opts) as (io, client):
        streams = io.run(broker.partition_streams(client, opts))
        for batch in batches:
            if batch.num_rows == 0:
                continue
            bodies = _bodies(batch)
            if opts.stream:
                io.run(send(opts.stream, bodies))
                continue
            by_stream: dict[str, list[bytes]] = {}
            for target, body in zip(_targets(batch, streams), bodies, strict=True):
                by_stream.setdefault(target, []).append(body)
            for target, group in by_stream.items():
                io.run(send(target, group))
        for p in producers.values():
            io.run(p.flush())
    return Published(partition, sent, skipped)


def check_target(opts: Options) -> None:
    """Refuse, where the write is planned, a stream or super stream the broker does not have:
    a write never creates one, and without this check every task would fail on its executor
    with a trace of its own. One clear error instead (a ``ValueError``)."""
    where = f"on {opts.host}:{opts.port}" + (f", vhost {opts.vhost}" if opts.vhost != "/" else "")

    async def missing(client: Client) -> str | None:
        if opts.stream:
            if await client.stream_exists(opts.stream):
                return None
            return (f"the stream {opts.stream!r} does not exist {where}: a write needs it to "
                    f"exist; create it first (streamlet streams create {opts.stream})")
        assert opts.super_stream
        try:
            await client.partitions(opts.super_stream)
        except StreamletError as e:
            if e.code != Code.STREAM_DOES_NOT_EXIST:
                raise
            return (f"the super stream {opts.super_stream!r} does not exist {where}: a write "
                    f"needs it to exist; create it first (streamlet streams create-super "
                    f"{opts.super_stream} --partitions N)")
        return None

    problem = broker.call(opts, missing)
    if problem:
        raise ValueError(problem)


class StreamletWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, opts: Options) -> None:
        check_target(opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return publish(self.opts, iterator, 0)


class StreamletStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, opts: Options) -> None:
        check_target(opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        if batch_id is None:
            raise RuntimeError("no streaming.sql.batchId in the task context")
        return publish(self.opts, iterator, int(batch_id) << BATCH_SHIFT)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: the messages are stored and confirmed when the tasks end."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: a rerun of the batch publishes only what is missing."""
