"""Batch reads against a real broker: exact rows, offsets and bytes, over several partitions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.spark.helpers import body, publish
from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process


def load(spark: Any, broker: BrokerProcess, stream: str, **options: str) -> Any:
    reader = (spark.read.format("streamlet").option("host", broker.host)
              .option("port", str(broker.port)).option("stream", stream))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_is_exact_over_partitions(spark: Any, shared_broker: BrokerProcess) -> None:
    n = 5000
    bodies = [body(i) for i in range(n)]
    publish(shared_broker.port, "batch-exact", bodies, batches=10)
    df = load(spark, shared_broker, "batch-exact", minPartitions="4")
    assert df.rdd.getNumPartitions() >= 4
    rows = df.collect()
    assert len(rows) == n
    assert sorted(r.offset for r in rows) == list(range(n))
    assert {r.offset: bytes(r.value) for r in rows} == dict(enumerate(bodies))
    assert {r.stream for r in rows} == {"batch-exact"} and {r.partition for r in rows} == {0}
    assert all(r.timestamp is not None for r in rows)
    # each partition's range starts at a chunk boundary, and none overlaps: per-task counts add up
    counts = df.rdd.mapPartitions(lambda it: [sum(1 for _ in it)]).collect()
    assert sum(counts) == n and all(c > 0 for c in counts)


def test_bounds_and_json_offsets(spark: Any, shared_broker: BrokerProcess) -> None:
    publish(shared_broker.port, "batch-bounds", [body(i) for i in range(300)], batches=3)
    df = load(spark, shared_broker, "batch-bounds", startingOffsets="120", endingOffsets="250")
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(120, 250))
    by_json = load(spark, shared_broker, "batch-bounds",
                   startingOffsets=json.dumps({"batch-bounds": 299}), endingOffsets="last")
    assert [r.offset for r in by_json.collect()] == [299]
    assert load(spark, shared_broker, "batch-bounds", startingOffsets="last").count() == 0
    future = load(spark, shared_broker, "batch-bounds", startingOffsets="timestamp:4102444800000")
    assert future.count() == 0
    past = load(spark, shared_broker, "batch-bounds", startingOffsets="timestamp:0")
    assert past.count() == 300


def test_aggregation_on_read(spark: Any, shared_broker: BrokerProcess) -> None:
    publish(shared_broker.port, "batch-agg", [b"k%d" % (i % 3) for i in range(90)])
    from pyspark.sql import functions as F
    got = (load(spark, shared_broker, "batch-agg").groupBy(F.col("value").cast("string"))
           .count().collect())
    assert sorted((r[0], r[1]) for r in got) == [("k0", 30), ("k1", 30), ("k2", 30)]
