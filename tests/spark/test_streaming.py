"""Streaming: exactly-once across a kill -9 of the driver, and replayed micro-batches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import body, publish, read_all, stored_offset
from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]


def driver(port: int, source: str, target: str, checkpoint: Path, mode: str,
           log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "ab") as out:
        # its own process group: kill -9 takes the driver's JVM and Python workers with it
        return subprocess.Popen(
            [sys.executable, "-m", "tests.spark.stream_driver", str(port), source, target,
             str(checkpoint), mode], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)


def commits(checkpoint: Path) -> int:
    d = checkpoint / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.exists() else 0


def test_exactly_once_across_driver_kill(broker: BrokerProcess, tmp_path: Path) -> None:
    n = 20000
    bodies = [body(i) for i in range(n)]
    publish(broker.port, "eo-src", bodies, batches=20)
    publish(broker.port, "eo-dst", [], create=True)
    checkpoint = tmp_path / "checkpoint"
    log = tmp_path / "driver.log"
    proc = driver(broker.port, "eo-src", "eo-dst", checkpoint, "continuous", log)
    try:
        deadline = time.monotonic() + 180
        while commits(checkpoint) < 3:  # a few micro-batches done, more to come
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    copied = read_all(broker.port, "eo-dst")
    assert 0 < len(copied) < n  # killed in the middle of the copy
    rerun = driver(broker.port, "eo-src", "eo-dst", checkpoint, "availableNow", log)
    assert rerun.wait(240) == 0, log.read_text()
    copied = read_all(broker.port, "eo-dst")
    assert [b for _, b in copied] == bodies  # each row once, in order
    # the end of the last batch: the last message (the stores' tracking chunks come after it)
    assert stored_offset(broker.port, "copier", "eo-src") == n - 1


def test_replayed_micro_batch_publishes_nothing_twice(spark: Any, shared_broker: BrokerProcess,
                                                      tmp_path: Path) -> None:
    port = shared_broker.port
    bodies = [body(i) for i in range(3000)]
    publish(port, "replay-src", bodies[:2000], batches=4)
    publish(port, "replay-dst", [], create=True)
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        df = (spark.readStream.format("streamlet").option("port", str(port))
              .option("stream", "replay-src").option("maxRecordsPerTrigger", "700").load())
        (df.select("value").writeStream.format("streamlet").option("port", str(port))
         .option("stream", "replay-dst").option("publisherReference", "replayer")
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
         .start().awaitTermination())

    run()
    assert [b for _, b in read_all(port, "replay-dst")] == bodies[:2000]
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert last >= 2  # 2000 rows at most 700 a batch
    # forget that the last batch was committed: Spark runs it again on restart, same range
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    publish(port, "replay-src", bodies[2000:], create=False)
    run()
    assert [b for _, b in read_all(port, "replay-dst")] == bodies
    assert (checkpoint / "commits" / str(last)).exists()  # the batch did run a second time
    assert max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()) > last


def batch_ids(checkpoint: Path, log: str) -> set[int]:
    """The micro-batches in the checkpoint's ``offsets`` (planned) or ``commits`` log."""
    d = checkpoint / log
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.exists() else set()


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.2)
    return got


def test_consumer_reference_stream_goes_idle(spark: Any, shared_broker: BrokerProcess,
                                             tmp_path: Path) -> None:
    """With nothing new to read, a processing-time query runs no micro-batch, although each
    stored offset writes a tracking chunk (which takes an offset); the stored offset is the
    end of the last batch, also of the batch after which the query went idle."""
    port = shared_broker.port
    bodies = [body(i) for i in range(600)]
    publish(port, "idle-src", bodies[:400], batches=2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (spark.readStream.format("streamlet").option("port", str(port))
             .option("stream", "idle-src").option("consumerReference", "idler").load()
             .select("offset", "value").writeStream.format("parquet")
             .option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="200 milliseconds").start())

    def rows_in() -> int:
        return sum(p.numInputRows for p in query.recentProgress)

    try:
        wait_for(lambda: rows_in() >= 400, 120, "400 rows read")
        # more data: the next batch starts at a committed end (whose store wrote a chunk)
        publish(port, "idle-src", bodies[400:], create=False)
        wait_for(lambda: rows_in() >= 600, 120, "600 rows read")
        wait_for(lambda: (stored_offset(port, "idler", "idle-src") or 0) >= 599, 60,
                 "the last batch's end stored")
        planned = batch_ids(checkpoint, "offsets")
        files = sorted(out.glob("*.parquet"))
        time.sleep(2.5)  # a dozen triggers with nothing new
        assert batch_ids(checkpoint, "offsets") == planned
        assert sorted(out.glob("*.parquet")) == files
        committed = batch_ids(checkpoint, "commits")
        empty = [p.batchId for p in query.recentProgress
                 if p.batchId in committed and p.numInputRows == 0]
        assert empty == []  # no micro-batch ran without rows
    finally:
        query.stop()
    got = sorted((r.offset, bytes(r.value)) for r in spark.read.parquet(str(out)).collect())
    assert got == read_all(port, "idle-src") and [b for _, b in got] == bodies
    # the last offset read (more than 599: the first store's tracking chunk took one)
    assert stored_offset(port, "idler", "idle-src") == got[-1][0]


def test_available_now_stores_the_last_batch_end(spark: Any, shared_broker: BrokerProcess,
                                                 tmp_path: Path) -> None:
    """availableNow: Spark commits a batch to the source only when it plans the next one,
    so the last batch is never committed to it; its end is stored all the same."""
    port = shared_broker.port
    bodies = [body(i) for i in range(1500)]
    publish(port, "once-src", bodies[:1000], batches=4)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> int:
        """Run to the end; the highest offset written."""
        (spark.readStream.format("streamlet").option("port", str(port))
         .option("stream", "once-src").option("consumerReference", "once")
         .option("maxRecordsPerTrigger", "300").load()
         .select("offset", "value").writeStream.format("parquet")
         .option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start().awaitTermination())
        return int(spark.read.parquet(str(out)).agg({"offset": "max"}).collect()[0][0])

    assert run() == 999
    assert stored_offset(port, "once", "once-src") == 999
    assert batch_ids(checkpoint, "commits") == {0, 1, 2, 3}  # 1000 rows, 300 a batch
    # again from the checkpoint, with more data (after the tracking chunks of the stores)
    publish(port, "once-src", bodies[1000:], create=False)
    last = run()
    assert stored_offset(port, "once", "once-src") == last
    assert batch_ids(checkpoint, "commits") == set(range(6))
    got = spark.read.parquet(str(out)).collect()
    assert sorted(bytes(r.value) for r in got) == sorted(bodies)
    assert len({r.offset for r in got}) == 1500
