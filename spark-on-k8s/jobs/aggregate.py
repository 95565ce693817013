"""An aggregation over a stream: messages and bytes per minute (and per ``kind`` application
property when the messages are AMQP), written as Parquet or shown.

    spark-submit aggregate.py --host streamlet --stream events [--amqp] [--output s3a://b/agg]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def per_minute(df: Any, key: str | None = None) -> Any:
    """``minute, [key,] messages, bytes`` from rows of the streamlet source."""
    from pyspark.sql import functions as F

    cols = [F.window("timestamp", "1 minute").start.alias("minute")]
    if key:
        cols.append(F.col("application_properties").getItem(key).alias(key))
    return (df.groupBy(*cols)
            .agg(F.count("*").alias("messages"), F.sum(F.length("value")).alias("bytes"))
            .orderBy(*[c for c in ("minute", key) if c]))


def main(argv: list[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    from streamlet_spark import StreamletDataSource

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default=os.environ.get("STREAMLET_HOST", "127.0.0.1"))
    p.add_argument("--port", default=os.environ.get("STREAMLET_PORT", "5552"))
    p.add_argument("--stream", required=True)
    p.add_argument("--amqp", metavar="KEY", help="decode AMQP and group by this property too")
    p.add_argument("--output", help="Parquet folder; without it the result is printed")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    spark = SparkSession.builder.appName("streamlet-aggregate").getOrCreate()
    spark.dataSource.register(StreamletDataSource)
    df = (spark.read.format("streamlet").option("host", a.host).option("port", a.port)
          .option("user", os.environ.get("STREAMLET_USER", "guest"))
          .option("password", os.environ.get("STREAMLET_PASSWORD", "guest"))
          .option("stream", a.stream).option("format", "amqp" if a.amqp else "raw").load())
    result = per_minute(df, a.amqp)
    if a.output:
        result.write.mode("overwrite").parquet(a.output)
    else:
        result.show(truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
