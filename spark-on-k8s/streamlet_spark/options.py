"""The data source's options, parsed once into a frozen, picklable value.

Spark hands options over as a case-insensitive mapping of strings; everything here is checked
where the query is planned, so a typo fails the query, not a task on an executor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FORMATS = ("raw", "amqp")


@dataclass(frozen=True)
class Options:
    host: str = "127.0.0.1"
    port: int = 5552
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    stream: str | None = None
    super_stream: str | None = None
    starting_offsets: str | None = None
    ending_offsets: str = "last"
    min_partitions: int = 1
    max_records_per_trigger: int | None = None
    format: str = "raw"
    publisher_reference: str | None = None
    consumer_reference: str | None = None
    batch_rows: int = 65536
    timeout: float = 30.0

    @property
    def target(self) -> str:
        """The stream or super stream named by the options (for messages)."""
        return self.stream or self.super_stream or "?"


def _int(opts: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = opts.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ValueError(f"option {key} must be >= {minimum}, not {value}")
    return value


def parse_options(raw: Mapping[str, str]) -> Options:
    """Parse Spark's options (keys compared case-insensitively)."""
    opts = {k.lower(): str(v) for k, v in raw.items()}
    stream, super_stream = opts.get("stream"), opts.get("superstream")
    if bool(stream) == bool(super_stream):
        raise ValueError("set exactly one of the options stream and superStream")
    fmt = opts.get("format", "raw").lower()
    if fmt not in FORMATS:
        raise ValueError(f"option format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    port = _int(opts, "port", 5552, 1)
    min_partitions = _int(opts, "minpartitions", 1, 1)
    batch_rows = _int(opts, "batchrows", 65536, 1)
    assert port is not None and min_partitions is not None and batch_rows is not None
    return Options(
        host=opts.get("host", "127.0.0.1"),
        port=port,
        user=opts.get("user", opts.get("username", "guest")),
        password=opts.get("password", "guest"),
        vhost=opts.get("vhost", "/"),
        stream=stream or None,
        super_stream=super_stream or None,
        starting_offsets=opts.get("startingoffsets") or None,
        ending_offsets=opts.get("endingoffsets") or "last",
        min_partitions=min_partitions,
        max_records_per_trigger=_int(opts, "maxrecordspertrigger", None, 1),
        format=fmt,
        publisher_reference=opts.get("publisherreference") or None,
        consumer_reference=opts.get("consumerreference") or None,
        batch_rows=batch_rows,
        timeout=float(opts.get("timeout", "30")),
    )
