"""The data source ``streamlet``: ``spark.dataSource.register(StreamletDataSource)``."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .options import Options, parse_options
from .schema import schema_for


class StreamletDataSource(DataSource):  # type: ignore[misc]
    """Read streams (batch and streaming) and write to them; see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "streamlet"

    @property
    def opts(self) -> Options:
        return parse_options(self.options)

    def schema(self) -> str:
        return schema_for(self.opts.format)

    def reader(self, schema: StructType) -> DataSourceReader:
        from .reader import StreamletReader
        return StreamletReader(self.opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream_reader import StreamletStreamReader
        return StreamletStreamReader(self.opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import StreamletWriter
        return StreamletWriter(self.opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .writer import StreamletStreamWriter
        return StreamletStreamWriter(self.opts)
