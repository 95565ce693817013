"""Super streams: every partition read, with its index; writes routed by a partition column."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.spark.helpers import body, create_super_stream, publish, read_all
from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process


def test_super_stream_read_and_write(spark: Any, shared_broker: BrokerProcess) -> None:
    port = shared_broker.port
    parts = create_super_stream(port, "ss", 3)
    assert parts == ["ss-0", "ss-1", "ss-2"]
    for i, p in enumerate(parts):
        publish(port, p, [body(1000 * i + j) for j in range(100 * (i + 1))], create=False,
                batches=2)
    df = (spark.read.format("streamlet").option("port", str(port)).option("superStream", "ss")
          .option("minPartitions", "6").load())
    rows = df.collect()
    assert len(rows) == 600
    for i, p in enumerate(parts):
        mine = sorted((r.offset, bytes(r.value)) for r in rows if r.stream == p)
        assert mine == read_all(port, p)
        assert {r.partition for r in rows if r.stream == p} == {i}
    start = json.dumps({"ss-0": 50, "ss-2": "last"})
    assert (spark.read.format("streamlet").option("port", str(port)).option("superStream", "ss")
            .option("startingOffsets", start).load().count()) == 50 + 200

    out = create_super_stream(port, "ss-out", 2)
    src = spark.createDataFrame([(i % 2, b"v%d" % i) for i in range(40)], "partition INT, value BINARY")
    (src.write.format("streamlet").option("port", str(port)).option("superStream", "ss-out")
     .option("publisherReference", "ss-writer").mode("append").save())
    assert sorted(b for _, b in read_all(port, out[0])) == sorted(b"v%d" % i for i in range(0, 40, 2))
    assert sorted(b for _, b in read_all(port, out[1])) == sorted(b"v%d" % i for i in range(1, 40, 2))
