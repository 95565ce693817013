"""A Spark task that is busy between our calls keeps its connection: the session's event loop
runs in a thread of its own, so heartbeats go out while Spark works (no Spark needed here: the
reader's generator is driven as Spark drives it, with pauses longer than two heartbeats)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streamlet_spark.broker import iter_chunk_groups
from streamlet_spark.offsets import Range
from streamlet_spark.options import Options
from tests.spark.helpers import body, publish
from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process

HEARTBEAT = 1


def test_a_reader_busy_between_groups_outlives_the_heartbeat(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(f"[server]\nheartbeat = {HEARTBEAT}\n")
    broker = BrokerProcess(tmp_path / "data", config=config).start()
    try:
        bodies = [body(i) for i in range(300)]
        publish(broker.port, "busy", bodies, batches=3)  # three chunks
        opts = Options(port=broker.port, stream="busy")
        got = 0
        for group in iter_chunk_groups(opts, Range("busy", 0, 0, len(bodies)), min_records=1,
                                       credit=1):
            got += sum(header.num_records for header, _ in group)
            time.sleep(3.5 * HEARTBEAT)  # Spark at work: past the broker's 2-3 silent intervals
        assert got == len(bodies)
        assert "no heartbeat" not in broker.log_path.read_text()
    finally:
        broker.stop()
