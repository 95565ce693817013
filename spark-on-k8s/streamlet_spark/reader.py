"""Batch reads: plan offset ranges cut at chunk boundaries, read each as Arrow batches."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from streamlet.client import Client

from . import broker
from .offsets import Range, cut, parse_bounds, split_points
from .options import Options
from .records import chunk_values
from .schema import RowsPart, arrow_schema, rows_batch


class RangePartition(InputPartition):  # type: ignore[misc]
    """One task's work: an offset range of one partition stream (pickled to the executor)."""

    def __init__(self, rng: Range) -> None:
        super().__init__(rng)
        self.rng = rng


async def plan_ranges(client: Client, opts: Options, starting: str | None, ending: str | None,
                      pieces: int) -> list[Range]:
    """Resolve the bounds of every partition stream, then cut each stream's range into about
    ``pieces / streams`` parts at chunk starts (a chunk is never read by two tasks)."""
    streams = await broker.partition_streams(client, opts)
    starts = parse_bounds(starting, streams, "first")
    ends = parse_bounds(ending, streams, "last")
    per_stream = max(1, -(-pieces // len(streams)))
    ranges: list[Range] = []
    for i, s in enumerate(streams):
        start = await broker.resolve(client, s, starts[s])
        end = max(await broker.resolve(client, s, ends[s]), start)
        rng = Range(s, i, start, end)
        cuts = [await broker.chunk_start(client, s, p) for p in split_points(start, end, per_stream)]
        ranges.extend(cut(rng, cuts) or [rng])
    return ranges


def read_range(opts: Options, rng: Range, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of ``[rng.start, rng.end)`` as batches of about ``opts.batch_rows`` rows: one
    Arrow batch per group of chunks (a batch costs Spark, and Arrow, a fixed overhead)."""
    for group in broker.iter_chunk_groups(opts, rng, opts.batch_rows):
        parts: list[RowsPart] = []
        for header, data in group:
            values = chunk_values(data)
            lo = max(rng.start - header.chunk_id, 0)
            hi = min(rng.end - header.chunk_id, len(values))
            if hi > lo:
                parts.append(RowsPart(header.timestamp, header.chunk_id + lo,
                                      values.slice(lo, hi - lo)))
        if parts:
            yield rows_batch(target, rng.stream, rng.partition, parts)


class StreamletReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: Options, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        opts = self.opts

        async def plan(client: Client) -> list[Range]:
            return await plan_ranges(client, opts, opts.starting_offsets, opts.ending_offsets,
                                     opts.min_partitions)
        ranges = broker.call(opts, plan)
        return [RangePartition(r) for r in ranges if r.count > 0] or [
            RangePartition(ranges[0] if ranges else Range(opts.target, 0, 0, 0))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self.opts, partition.rng, arrow_schema(self.schema))
