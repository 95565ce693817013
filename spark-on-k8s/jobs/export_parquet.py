"""Incremental export of a stream (or super stream) to Parquet; progress is a stored offset.

Each run reads from one after the offset stored under ``--reference`` (or from the first) up to
the stream's end when the run starts, writes one folder per run (``run=<start>``: a retried run
rewrites the same folder, so no row is exported twice), then stores the end as the reference's
offset.

    spark-submit export_parquet.py --host streamlet --stream events --destination s3a://b/events

TLS as the CLI (``--tls``, ``--ca-cert``, ``--cert``/``--key``, or PEM text in ``STREAMLET_TLS_*``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamlet.client import Client, OffsetSpec

#: PEM text in the environment, and the option naming the file it is written to.
TLS_ENV = {"STREAMLET_TLS_CA": "ca_cert", "STREAMLET_TLS_CERT": "cert",
           "STREAMLET_TLS_KEY": "key"}


@dataclass(frozen=True)
class ExportConfig:
    host: str
    port: int
    destination: str
    stream: str | None = None
    super_stream: str | None = None
    reference: str | None = None
    format: str = "raw"
    user: str = "guest"
    password: str = "guest"
    tls: bool = False
    ca_cert: str | None = None  # PEM file paths, as the data source's options
    cert: str | None = None
    key: str | None = None

    @property
    def ref(self) -> str:
        return self.reference or f"export-{self.stream or self.super_stream}"

    def source_options(self) -> dict[str, str]:
        opts = {"host": self.host, "port": str(self.port), "user": self.user,
                "password": self.password, "format": self.format}
        if self.stream:
            opts["stream"] = self.stream
        else:
            assert self.super_stream
            opts["superStream"] = self.super_stream
        if self.tls:
            opts["tls"] = "true"
            for name, path in (("caCert", self.ca_cert), ("clientCert", self.cert),
                               ("clientKey", self.key)):
                if path:
                    opts[name] = path
        return opts


async def _connect(cfg: ExportConfig) -> Client:
    """A connection as the data source makes them (the same options, TLS included)."""
    from streamlet_spark.broker import open_client
    from streamlet_spark.options import parse_options

    return await open_client(parse_options(cfg.source_options()))


async def _plan(cfg: ExportConfig) -> tuple[dict[str, int], dict[str, int]]:
    """Per partition stream: where this run starts (after the stored offset) and ends."""
    client = await _connect(cfg)
    try:
        streams = ([cfg.stream] if cfg.stream else
                   await client.partitions(cfg.super_stream or ""))
        starts, ends = {}, {}
        for s in streams:
            stored = await client.query_offset(cfg.ref, s)
            first = await client.resolve_offset(s, OffsetSpec.first())
            starts[s] = first if stored is None else max(stored + 1, first)
            ends[s] = max(await client.resolve_offset(s, OffsetSpec.next()), starts[s])
        return starts, ends
    finally:
        await client.close()


async def _store(cfg: ExportConfig, ends: dict[str, int]) -> None:
    client = await _connect(cfg)
    try:
        for s, end in ends.items():
            await client.store_offset(cfg.ref, s, end - 1)
        for s in ends:  # a round trip: the stores were taken before the job reports success
            await client.query_offset(cfg.ref, s)
    finally:
        await client.close()


def run_name(starts: dict[str, int]) -> str:
    if len(starts) == 1:
        return f"{next(iter(starts.values())):020d}"
    return hashlib.sha256(json.dumps(starts, sort_keys=True).encode()).hexdigest()[:20]


def export(spark: Any, cfg: ExportConfig) -> int:
    """Export what is new since the last run; return the number of rows written."""
    starts, ends = asyncio.run(_plan(cfg))
    pending = {s: e for s, e in ends.items() if e > starts[s]}
    if not pending:
        return 0
    reader = spark.read.format("streamlet")
    for k, v in cfg.source_options().items():
        reader = reader.option(k, v)
    df = (reader.option("startingOffsets", json.dumps(starts))
          .option("endingOffsets", json.dumps(ends)).load())
    target = f"{cfg.destination.rstrip('/')}/run={run_name(starts)}"
    df.write.mode("overwrite").parquet(target)
    count = int(spark.read.parquet(target).count())
    asyncio.run(_store(cfg, pending))
    return count


def parse_args(argv: list[str], pem_dir: Path | None = None) -> ExportConfig:
    """The job's configuration; PEM text in the environment (TLS_ENV) is written into
    ``pem_dir`` (needed only then) and used unless the flag names a file."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default=os.environ.get("STREAMLET_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=None,
                   help="default: $STREAMLET_PORT, else 5551 with --tls, else 5552")
    p.add_argument("--tls", action="store_true", help="connect with TLS")
    p.add_argument("--ca-cert", help="with --tls: trust the CAs in this PEM file")
    p.add_argument("--cert", help="with --tls: a client certificate (PEM)")
    p.add_argument("--key", help="with --cert: its private key (PEM)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--stream")
    target.add_argument("--super-stream")
    p.add_argument("--destination", required=True, help="Parquet folder (any Hadoop URI)")
    p.add_argument("--reference", help="consumer reference holding the progress")
    p.add_argument("--format", choices=("raw", "amqp"), default="raw")
    a = p.parse_args(argv)
    for env, dest in TLS_ENV.items():
        text = os.environ.get(env)
        if text and getattr(a, dest) is None:
            if pem_dir is None:
                p.error(f"${env}: no folder to write it to")
            path = pem_dir / dest
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(text)
            setattr(a, dest, str(path))
    given = [f"--{d.replace('_', '-')}" for d in TLS_ENV.values() if getattr(a, d)]
    if given and not a.tls:
        p.error(f"{', '.join(given)}: only with --tls")
    if a.key and not a.cert:
        p.error("--key: only with --cert")
    port = a.port or int(os.environ.get("STREAMLET_PORT") or (5551 if a.tls else 5552))
    return ExportConfig(host=a.host, port=port, destination=a.destination, stream=a.stream,
                        super_stream=a.super_stream, reference=a.reference, format=a.format,
                        user=os.environ.get("STREAMLET_USER", "guest"),
                        password=os.environ.get("STREAMLET_PASSWORD", "guest"),
                        tls=a.tls, ca_cert=a.ca_cert, cert=a.cert, key=a.key)


def main(argv: list[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    from streamlet_spark import StreamletDataSource

    with tempfile.TemporaryDirectory(prefix="streamlet-export-") as pem_dir:
        cfg = parse_args(sys.argv[1:] if argv is None else argv, Path(pem_dir))
        spark = SparkSession.builder.appName(f"streamlet-export-{cfg.ref}").getOrCreate()
        spark.dataSource.register(StreamletDataSource)
        try:
            n = export(spark, cfg)
            print(json.dumps({"exported": n, "reference": cfg.ref}))
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
