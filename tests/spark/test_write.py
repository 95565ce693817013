"""Batch writes: deterministic publishing ids make a retried task publish nothing twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import body, publish, read_all, stream_exists
from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process


def test_batch_write_round_trip(spark: Any, shared_broker: BrokerProcess) -> None:
    port = shared_broker.port
    publish(port, "w-plain", [], create=True)
    rows = [(body(i),) for i in range(1000)]
    df = spark.createDataFrame(rows, "value BINARY").repartition(3)
    (df.write.format("streamlet").option("port", str(port)).option("stream", "w-plain")
     .option("publisherReference", "w-plain-job").mode("append").save())
    got = sorted(b for _, b in read_all(port, "w-plain"))
    assert got == sorted(r[0] for r in rows)
    # the same job again with the same reference: every id is known, nothing is stored
    (df.write.format("streamlet").option("port", str(port)).option("stream", "w-plain")
     .option("publisherReference", "w-plain-job").mode("append").save())
    assert len(read_all(port, "w-plain")) == 1000

def test_retried_write_task_publishes_no_duplicates(spark: Any, shared_broker: BrokerProcess,
                                                    tmp_path: Path) -> None:

    port = shared_broker.port
    publish(port, "w-retry", [], create=True)
    n = 4000
    marker = tmp_path / "failed-once"

    def fail_once(batches: Any) -> Any:
        """Pass rows on; in the first attempt of task 0, fail once half of them reached the
        stream (so the retry meets ids the broker already has)."""
        from pyspark import TaskContext

        from tests.spark.helpers import read_all as read_stream

        ctx = TaskContext.get()
        assert ctx is not None
        seen = 0
        for batch in batches:
            yield batch
            seen += batch.num_rows
            if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and seen >= 1000:
                import time
                deadline = time.monotonic() + 60
                while len(read_stream(port, "w-retry")) < 500 and time.monotonic() < deadline:
                    time.sleep(0.1)
                marker.write_text(str(len(read_stream(port, "w-retry"))))
                raise RuntimeError("injected failure after publishing")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "250")
    try:
        df = (spark.range(n, numPartitions=2)
              .selectExpr("cast(concat('r', cast(id as string)) as binary) as value")
              .mapInArrow(fail_once, "value BINARY"))
        (df.write.format("streamlet").option("port", str(port)).option("stream", "w-retry")
         .option("publisherReference", "w-retry-job").mode("append").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert marker.exists() and int(marker.read_text()) >= 500  # the first attempt published
    got = [b for _, b in read_all(port, "w-retry")]
    assert len(got) == n
    assert sorted(got) == sorted(b"r%d" % i for i in range(n))



def test_write_to_a_missing_stream_is_one_clear_error(spark: Any, shared_broker: BrokerProcess,
                                                      tmp_path: Path) -> None:
    """A write never creates its stream: one error naming it and saying to create it, raised
    where the write is planned (no task runs, so no executor traces), batch and streaming,
    stream and super stream."""
    port = shared_broker.port
    df = spark.createDataFrame([(b"x",)], "value BINARY")
    rate = spark.readStream.format("rate").load().selectExpr("cast(value as string) as value")
    cases = [("stream", "w-nosuch", "streamlet streams create w-nosuch"),
             ("superStream", "w-nosuch-super", "streamlet streams create-super w-nosuch-super")]
    for option, name, hint in cases:
        def batch(option: str = option, name: str = name) -> None:
            (df.write.format("streamlet").option("port", str(port)).option(option, name)
             .mode("append").save())

        def streaming(option: str = option, name: str = name) -> None:
            query = (rate.writeStream.format("streamlet").option("port", str(port))
                     .option(option, name)
                     .option("checkpointLocation", str(tmp_path / name)).start())
            try:
                query.processAllAvailable()
            finally:
                query.stop()

        for write in (batch, streaming):
            with pytest.raises(Exception) as failed:
                write()
            text = str(failed.value)
            assert f"{name!r} does not exist on 127.0.0.1:{port}" in text, text[:3000]
            assert hint in text
            assert "in stage" not in text, text[:3000]  # no task ran
    assert not stream_exists(port, "w-nosuch")
