"""One local SparkSession for every Spark test of a run (starting one takes seconds; under xdist
Spark's modules share one worker, tests/conftest.py), workers on this virtual environment's
Python, the streamlet source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def spark_session(master: str = "local[2]", **conf: str):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    from streamlet_spark import StreamletDataSource

    builder = (SparkSession.builder.master(master).appName("streamlet-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g"))
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.dataSource.register(StreamletDataSource)
    return spark


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    # local[2,4]: two cores, and a failed task is retried (the retry tests need that)
    session = spark_session("local[2,4]")
    yield session
    session.stop()
