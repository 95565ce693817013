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
from .schema import arrow_schema, chunk_batch


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
    """The rows of ``[rng.start, rng.end)`` as batches of about ``opts.batch_rows`` rows
    (small chunks are gathered: a batch costs Spark a fixed overhead)."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for header, data in broker.iter_chunks(opts, rng):
        values = chunk_values(data)
        lo = max(rng.start - header.chunk_id, 0)
        hi = min(rng.end - header.chunk_id, len(values))
        if hi <= lo:
            continue
        pending.append(chunk_batch(target, rng.stream, rng.partition, header.timestamp,
                                   header.chunk_id + lo, values.slice(lo, hi - lo)))
        rows += hi - lo
        if rows >= opts.batch_rows:
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, rows = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


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
