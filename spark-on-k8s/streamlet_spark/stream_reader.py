"""Streaming reads. An offset is ``{partition stream: next offset to read}``; Spark records the
end of each micro-batch in its checkpoint before running it, and after a crash replays exactly
that recorded range, so the rows of a batch are the same however often it runs."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from streamlet.client import Client

from . import broker
from .offsets import Range, limit_ranges, parse_bounds, split_points
from .options import Options
from .reader import RangePartition, read_range
from .schema import arrow_schema

Offset = dict[str, int]


class StreamletStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Ends are the ends of user data (``broker.user_end``): the tracking chunk a stored
    offset writes takes an offset, and counting it would make every stored offset the next
    (empty) micro-batch, forever.

    With ``consumerReference`` the end of each committed batch is stored. Spark tells a
    source a batch was committed (``commit``) only when it plans the next batch, so the last
    batch before the query goes idle, and the last of an ``availableNow`` run, would never be
    stored. But Spark asks for ``latestOffset(start)`` after each committed batch, ``start``
    being that batch's end, before it decides whether another batch runs: the end is stored
    there (``commit`` then finds it done)."""

    def __init__(self, opts: Options, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._streams: list[str] | None = None
        self._target: Offset | None = None  # availableNow: the end fixed at the start
        self._initial: Offset | None = None  # where a new query starts: no batch's end
        self._known: dict[str, tuple[int, int]] = {}  # last user chunk and its end, by stream
        self._latest: Offset | None = None  # ends read by latestOffset, for reportLatestOffset
        self._stored: Offset = {}  # the batch end stored last, by stream

    def _ends(self) -> Offset:
        opts = self.opts

        async def ends(client: Client) -> tuple[list[str], Offset]:
            streams = self._streams or await broker.partition_streams(client, opts)
            return streams, {s: await broker.user_end(client, s, opts.timeout, self._known)
                             for s in streams}
        self._streams, offsets = broker.call(opts, ends)
        return offsets

    def initialOffset(self) -> Offset:
        opts = self.opts

        async def initial(client: Client) -> tuple[list[str], Offset]:
            streams = await broker.partition_streams(client, opts)
            bounds = parse_bounds(opts.starting_offsets, streams, "first")
            return streams, {s: await broker.resolve(client, s, bounds[s]) for s in streams}
        self._streams, offsets = broker.call(opts, initial)
        self._initial = dict(offsets)
        return offsets

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends()

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        begun = {s: int(o) for s, o in start.items()}
        if begun != self._initial:
            self._store(begun)  # the end of the batch Spark committed last
        if self._target is None:
            ends = self._latest = self._ends()
        else:
            ends = dict(self._target)
        starts = {s: begun.get(s, 0) for s in ends}
        ends = {s: max(e, starts[s]) for s, e in ends.items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return limit_ranges(starts, ends, max_rows)

    def reportLatestOffset(self) -> Offset | None:
        latest, self._latest = self._latest, None
        return latest if latest is not None else self._ends()

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        streams = self._streams or sorted(end)
        parts: list[InputPartition] = []
        for i, s in enumerate(streams):
            a, b = int(start.get(s, 0)), int(end.get(s, 0))
            edges = [a, *split_points(a, b, self.opts.min_partitions), b]
            parts.extend(RangePartition(Range(s, i, x, y))
                         for x, y in zip(edges, edges[1:], strict=False) if y > x)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self.opts, partition.rng, arrow_schema(self.schema))

    def commit(self, end: Offset) -> None:
        """Spark finished every batch up to ``end`` (told when it plans the next batch; the
        end was mostly stored by ``latestOffset`` already)."""
        self._store({s: int(o) for s, o in end.items()})

    def _store(self, end: Offset) -> None:
        """With ``consumerReference``, store ``end`` in the stream as the reference's offset,
        the last offset read (progress visible to other tools; the checkpoint stays the
        truth). Returns once the broker has it: StoreOffset has no answer, the QueryOffset
        sent after it on the same connection does. An end the broker already has (a restart)
        is not stored again."""
        ref = self.opts.consumer_reference
        todo = {s: o for s, o in end.items() if o > 0 and self._stored.get(s) != o}
        if not ref or not todo:
            return

        async def store(client: Client) -> None:
            for s, o in todo.items():
                if s not in self._stored and await client.query_offset(ref, s) == o - 1:
                    continue
                await client.store_offset(ref, s, o - 1)
                await client.query_offset(ref, s)
        broker.call(self.opts, store)
        self._stored.update(todo)
