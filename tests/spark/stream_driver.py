"""A Spark driver run as a subprocess by the tests: copy one stream into another through a
streaming query (streamlet source, streamlet sink) with a checkpoint.

    python -m tests.spark.stream_driver PORT SOURCE TARGET CHECKPOINT MODE
MODE is ``continuous`` (micro-batches of 500 rows until killed) or ``availableNow``."""

from __future__ import annotations

import sys

from tests.spark.conftest import spark_session


def main() -> None:
    port, source, target, checkpoint, mode = sys.argv[1:6]
    spark = spark_session("local[2]")
    df = (spark.readStream.format("streamlet").option("port", port).option("stream", source)
          .option("maxRecordsPerTrigger", "500").option("consumerReference", "copier").load())
    writer = (df.select("value").writeStream.format("streamlet").option("port", port)
              .option("stream", target).option("publisherReference", "copier")
              .option("checkpointLocation", checkpoint))
    if mode == "availableNow":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        query = writer.trigger(processingTime="100 milliseconds").start()
        print("started", flush=True)
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
