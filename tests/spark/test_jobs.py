"""The jobs: the incremental Parquet export (progress stored in the stream) and aggregation."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.spark.helpers import body, publish, read_all, stored_offset
from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process

JOBS = Path(__file__).resolve().parents[2] / "spark-on-k8s" / "jobs"


def job(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"streamlet_jobs_{name}", JOBS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_export_is_incremental(spark: Any, shared_broker: BrokerProcess, tmp_path: Path) -> None:
    export = job("export_parquet")
    port = shared_broker.port
    dest = tmp_path / "export"
    cfg = export.parse_args(["--port", str(port), "--stream", "exp", "--destination", str(dest)])
    bodies = [body(i) for i in range(1500)]
    publish(port, "exp", bodies[:1000], batches=3)

    assert export.export(spark, cfg) == 1000
    first = spark.read.parquet(str(dest)).collect()
    assert sorted((r.offset, bytes(r.value)) for r in first) == read_all(port, "exp")
    assert stored_offset(port, "export-exp", "exp") == 999

    publish(port, "exp", bodies[1000:], create=False)
    assert export.export(spark, cfg) == 500  # only the new part
    rows = spark.read.parquet(str(dest)).collect()
    assert len(rows) == 1500
    assert sorted(bytes(r.value) for r in rows) == sorted(bodies)
    assert len({r.offset for r in rows}) == 1500
    assert len(list(dest.glob("run=*"))) == 2
    assert export.export(spark, cfg) == 0  # nothing new (the stored offset's own chunk aside)


def test_aggregate_per_minute(spark: Any, shared_broker: BrokerProcess) -> None:
    aggregate = job("aggregate")
    publish(shared_broker.port, "agg", [b"x" * (i % 5) for i in range(200)])
    df = (spark.read.format("streamlet").option("port", str(shared_broker.port))
          .option("stream", "agg").load())
    rows = aggregate.per_minute(df).collect()
    assert sum(r.messages for r in rows) == 200
    assert sum(r.bytes for r in rows) == sum(i % 5 for i in range(200))
