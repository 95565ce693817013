"""The rows' schema, and building Arrow record batches that match it exactly.

Spark checks a yielded batch's Arrow schema against the one it derives from the declared schema
(``to_arrow_schema(..., timezone="UTC")``), so that same function makes ours."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from streamlet.amqp import AmqpError, decode_message, text

RAW_COLUMNS = "stream STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, value BINARY"
AMQP_COLUMNS = (RAW_COLUMNS + ", body BINARY, properties MAP<STRING, STRING>, "
                "application_properties MAP<STRING, STRING>")


def schema_for(fmt: str) -> str:
    return AMQP_COLUMNS if fmt == "amqp" else RAW_COLUMNS


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


class RowsPart(NamedTuple):
    """The rows one chunk gives a batch: the chunk's timestamp, the first row's offset, the
    values (consecutive offsets from there)."""

    timestamp_ms: int
    first_offset: int
    values: pa.BinaryArray


def rows_batch(target: pa.Schema, stream: str, partition: int,
               parts: list[RowsPart]) -> pa.RecordBatch:
    """Rows of one partition stream, from one or more chunks, as one batch of ``target``:
    columns are built once per batch with numpy, never per row."""
    counts = np.fromiter((len(p.values) for p in parts), dtype=np.int64, count=len(parts))
    n = int(counts.sum())
    firsts = np.fromiter((p.first_offset for p in parts), dtype=np.int64, count=len(parts))
    # each chunk's offsets are consecutive: the chunk's first offset repeated, plus 0..count-1
    starts = np.repeat(firsts - (np.cumsum(counts) - counts), counts)
    offsets = starts + np.arange(n, dtype=np.int64)
    stamps = np.repeat(np.fromiter((p.timestamp_ms * 1000 for p in parts), dtype=np.int64,
                                   count=len(parts)), counts)
    values = parts[0].values if len(parts) == 1 else pa.concat_arrays([p.values for p in parts])
    columns: dict[str, pa.Array] = {
        "stream": pa.repeat(pa.scalar(stream, pa.string()), n),
        "partition": pa.repeat(pa.scalar(partition, pa.int32()), n),
        "offset": pa.array(offsets),
        "timestamp": pa.array(stamps).cast(target.field("timestamp").type),
        "value": values,
    }
    if "body" in target.names:
        columns.update(_amqp_columns(target, values))
    arrays = [columns[name].cast(target.field(name).type) for name in target.names]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _amqp_columns(target: pa.Schema, values: pa.BinaryArray) -> dict[str, pa.Array]:
    bodies: list[bytes | None] = []
    props: list[list[tuple[str, str | None]] | None] = []
    app: list[list[tuple[str, str | None]] | None] = []
    for raw in values.to_pylist():
        try:
            msg = decode_message(raw)
        except (AmqpError, UnicodeDecodeError, ValueError):
            bodies.append(None)  # not an AMQP message: value still has the bytes
            props.append(None)
            app.append(None)
            continue
        bodies.append(msg.body)
        props.append([(k, text(v)) for k, v in msg.properties.items()])
        app.append([(str(k), text(v)) for k, v in msg.application_properties.items()])
    return {
        "body": pa.array(bodies, pa.binary()),
        "properties": pa.array(props, target.field("properties").type),
        "application_properties": pa.array(app, target.field("application_properties").type),
    }
