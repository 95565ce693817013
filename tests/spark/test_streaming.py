"""Streaming: exactly-once across a kill -9 of the driver, and replayed micro-batches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.spark.helpers import body, publish, read_all, stored_offset
from tests.support.brokers import BrokerProcess

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
    stored = stored_offset(broker.port, "copier", "eo-src")
    assert stored is not None and stored >= n - 1  # tracking chunks take offsets too


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
