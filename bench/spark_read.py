"""Rows/s reading N messages of a stream into a Spark DataFrame (noop sink), against reading
the same rows from Parquet with Spark, in one run (target >= 0.5x).

    .venv/bin/python bench/spark_read.py [--messages 1000000] [--size 100] [--runs 3]

Starts its own broker on a free loopback port and a local[2] Spark session; prints one JSON
line. The Parquet copy is written from the streamlet read, so both reads see the same rows."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(data: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "streamlet", "serve", "--host", "127.0.0.1",
                             "--port", str(port), "--data-dir", str(data)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the broker did not start")


async def fill(port: int, stream: str, n: int, size: int) -> None:
    from streamlet.client import connect

    client = await connect("127.0.0.1", port)
    await client.create_stream(stream, exists_ok=True)
    producer = await client.producer(stream, batch_size=1000, max_unconfirmed=200_000)
    pad = b"x" * max(size - 12, 0)
    step = 10_000
    for i in range(0, n, step):
        await producer.send_many([b"%012d" % j + pad for j in range(i, min(i + step, n))])
    await producer.flush()
    await client.close()


def memory_source(rows: int, size: int, batch_rows: int) -> type:
    """A data source yielding the same Arrow batches as streamlet's, built in memory: the
    ceiling of Spark's Python data source path for these rows, without the broker."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.types import StructType

    from streamlet_spark.schema import RAW_COLUMNS, RowsPart, arrow_schema, rows_batch

    class Reader(DataSourceReader):  # type: ignore[misc]
        def __init__(self, schema: StructType) -> None:
            self.schema = schema

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0), InputPartition(1)]

        def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
            import pyarrow as pa
            target = arrow_schema(self.schema)
            pad = b"x" * max(size - 12, 0)
            values = pa.array([b"%012d" % i + pad for i in range(batch_rows)], pa.binary())
            for start in range(0, rows // 2, batch_rows):
                n = min(batch_rows, rows // 2 - start)
                yield rows_batch(target, "bench", 0, [RowsPart(1700000000000, start, values.slice(0, n))])

    class Memory(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "memory"

        def schema(self) -> str:
            return RAW_COLUMNS

        def reader(self, schema: StructType) -> Reader:
            return Reader(schema)

    return Memory


def best_rate(run: object, rows: int, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        run()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return rows / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100, help="message body bytes")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--partitions", type=int, default=2, help="minPartitions of the read")
    p.add_argument("--batch-rows", type=int, default=65536, help="rows per Arrow batch")
    a = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    tmp = Path(tempfile.mkdtemp(prefix="spark-read-bench-"))
    port = free_port()
    broker = start_broker(tmp / "data", port)
    try:
        asyncio.run(fill(port, "bench", a.messages, a.size))
        from pyspark.sql import SparkSession

        from streamlet_spark import StreamletDataSource

        spark = (SparkSession.builder.master("local[2]").appName("spark-read-bench")
                 .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g")
                 .getOrCreate())
        spark.dataSource.register(StreamletDataSource)

        def stream_df():  # type: ignore[no-untyped-def]
            return (spark.read.format("streamlet").option("port", str(port))
                    .option("stream", "bench").option("minPartitions", str(a.partitions))
                    .option("batchRows", str(a.batch_rows)).load())

        parquet = str(tmp / "parquet")
        stream_df().write.parquet(parquet)
        rows = spark.read.parquet(parquet).count()
        assert rows == a.messages, (rows, a.messages)

        def read_stream() -> None:
            stream_df().write.format("noop").mode("overwrite").save()

        def read_parquet() -> None:
            spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

        spark.dataSource.register(memory_source(rows, a.size, a.batch_rows))

        def read_memory() -> None:
            spark.read.format("memory").load().write.format("noop").mode("overwrite").save()

        read_stream()  # warm up: Python workers, JIT
        read_parquet()
        read_memory()
        streamlet_rate = best_rate(read_stream, rows, a.runs)
        parquet_rate = best_rate(read_parquet, rows, a.runs)
        memory_rate = best_rate(read_memory, rows, a.runs)
        spark.stop()
        print(json.dumps({
            "messages": rows, "body_bytes": a.size, "cores": os.cpu_count(),
            "partitions": a.partitions, "batch_rows": a.batch_rows,
            "streamlet_rows_per_s": round(streamlet_rate),
            "parquet_rows_per_s": round(parquet_rate),
            "ratio": round(streamlet_rate / parquet_rate, 3),
            "python_source_ceiling_rows_per_s": round(memory_rate),
        }))
    finally:
        broker.terminate()
        broker.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
