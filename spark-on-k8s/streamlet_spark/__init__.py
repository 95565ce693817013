"""A PySpark data source for streamlet streams (see docs/spark.md).

    from streamlet_spark import StreamletDataSource
    spark.dataSource.register(StreamletDataSource)
    spark.read.format("streamlet").option("stream", "events").load()
"""

from .source import StreamletDataSource

__all__ = ["StreamletDataSource"]
