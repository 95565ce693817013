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
    def __init__(self, opts: Options, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._streams: list[str] | None = None
        self._target: Offset | None = None  # availableNow: the end fixed at the start
        # Storing an offset writes a tracking chunk, which takes an offset: without care each
        # commit would make the next (empty) micro-batch, forever. After a store we note the
        # end it left, and treat offsets up to it as nothing new.
        self._stored_at: Offset = {}  # the batch end we stored
        self._quiet_end: Offset = {}  # the stream's end right after that store

    def _ends(self) -> Offset:
        async def ends(client: Client) -> tuple[list[str], Offset]:
            streams = self._streams or await broker.partition_streams(client, self.opts)
            return streams, {s: await broker.end_offset(client, s) for s in streams}
        self._streams, offsets = broker.call(self.opts, ends)
        return offsets

    def initialOffset(self) -> Offset:
        opts = self.opts

        async def initial(client: Client) -> tuple[list[str], Offset]:
            streams = await broker.partition_streams(client, opts)
            bounds = parse_bounds(opts.starting_offsets, streams, "first")
            return streams, {s: await broker.resolve(client, s, bounds[s]) for s in streams}
        self._streams, offsets = broker.call(opts, initial)
        return offsets

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends()

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        ends = self._ends() if self._target is None else dict(self._target)
        starts = {s: int(start.get(s, 0)) for s in ends}
        ends = {s: max(e, starts[s]) for s, e in ends.items()}
        for s in ends:  # only our own tracking chunk since the last stored batch end
            if starts[s] == self._stored_at.get(s) and ends[s] <= self._quiet_end.get(s, -1):
                ends[s] = starts[s]
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return limit_ranges(starts, ends, max_rows)

    def reportLatestOffset(self) -> Offset | None:
        return self._ends()

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
        """Spark finished every batch up to ``end``: with ``consumerReference``, store it in
        the stream too (progress visible to other tools; the checkpoint stays the truth)."""
        ref = self.opts.consumer_reference
        if not ref:
            return

        if all(int(end[s]) == self._stored_at.get(s) for s in end):
            return  # nothing new since the last store

        async def store(client: Client) -> Offset:
            for s, offset in end.items():
                if offset > 0:
                    await client.store_offset(ref, s, int(offset) - 1)
            # a round trip per stream: the stores landed before the ends are read
            return {s: await broker.end_offset(client, s) for s in end}
        if end:
            self._quiet_end = broker.call(self.opts, store)
            self._stored_at = {s: int(o) for s, o in end.items()}
