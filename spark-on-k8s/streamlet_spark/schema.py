"""The rows' schema, and building Arrow record batches that match it exactly.

Spark checks a yielded batch's Arrow schema against the one it derives from the declared schema
(``to_arrow_schema(..., timezone="UTC")``), so that same function makes ours."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from .amqp import AmqpError, decode_message, text

RAW_COLUMNS = "stream STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, value BINARY"
AMQP_COLUMNS = (RAW_COLUMNS + ", body BINARY, properties MAP<STRING, STRING>, "
                "application_properties MAP<STRING, STRING>")


def schema_for(fmt: str) -> str:
    return AMQP_COLUMNS if fmt == "amqp" else RAW_COLUMNS


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def chunk_batch(target: pa.Schema, stream: str, partition: int, timestamp_ms: int,
                first_offset: int, values: pa.BinaryArray) -> pa.RecordBatch:
    """One chunk's rows (``values`` already cut to the range) as a batch of ``target``."""
    n = len(values)
    columns: dict[str, pa.Array] = {
        "stream": pa.repeat(pa.scalar(stream, pa.string()), n),
        "partition": pa.repeat(pa.scalar(partition, pa.int32()), n),
        "offset": pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64)),
        "timestamp": pa.repeat(pa.scalar(timestamp_ms * 1000, target.field("timestamp").type), n),
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
