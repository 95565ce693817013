"""The source over TLS, with real PySpark in local mode against real brokers serving TLS only
(no plain listener at all): reads, writes and the export job verify the broker's certificate
against caCert; with verifyPeer they present clientCert. Bad option combinations fail where
the query is planned, naming the options."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamlet.client import OffsetSpec, connect
from streamlet.client.tls import client_context
from streamlet_spark.options import parse_options
from tests.spark.helpers import body
from tests.spark.test_jobs import job
from tests.support.brokers import BrokerProcess, free_port
from tests.support.certs import make_certs, tls_only_config

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _tls_only_broker(factory: Callable[..., BrokerProcess], tmp_path: Path, certs: Path,
                     verify_peer: bool) -> BrokerProcess:
    port = free_port()
    cfg = tmp_path / f"tls-{verify_peer}.toml"
    cfg.write_text(tls_only_config(certs, port, verify_peer))
    return factory(port=port, config=cfg)


def _client_tls(certs: Path, client: bool) -> Any:
    if client:
        return client_context(certs / "ca.crt", certs / "client.crt", certs / "client.key")
    return client_context(certs / "ca.crt")


def _stream(port: int, certs: Path, stream: str, bodies: list[bytes] | None = None,
            client: bool = False) -> list[bytes]:
    """Create ``stream`` and publish ``bodies`` when given; return every body it holds (over
    TLS with the client, not the source under test)."""
    async def main() -> list[bytes]:
        c = await connect("127.0.0.1", port, ssl=_client_tls(certs, client))
        try:
            if bodies is not None:
                await c.create_stream(stream, exists_ok=True)
                if bodies:
                    producer = await c.producer(stream)
                    await producer.send_many(bodies)
                    await producer.flush()
                    await producer.close()
            last = await c.resolve_offset(stream, OffsetSpec.last())
            end = await c.resolve_offset(stream, OffsetSpec.next())
            out: list[bytes] = []
            if last >= end:
                return out
            consumer = await c.consumer(stream, offset="first", credit=10)
            async for header, records, _ in consumer.chunks():
                out.extend(bytes(r) for r in records)
                if header.chunk_id >= last:
                    break
            await consumer.close()
            return out
        finally:
            await c.close()
    return asyncio.run(main())


def test_read_write_and_export_over_tls_only(spark: Any, broker_factory: Callable[..., BrokerProcess],
                                             certs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _tls_only_broker(broker_factory, tmp_path, certs, verify_peer=False)
    tls = {"port": str(b.port), "tls": "true", "caCert": str(certs / "ca.crt")}
    bodies = [body(i) for i in range(600)]

    _stream(b.port, certs, "t-in", [])
    df = spark.createDataFrame([(v,) for v in bodies], "value BINARY").repartition(2)
    (df.write.format("streamlet").options(**tls).option("stream", "t-in")
     .option("publisherReference", "t-writer").mode("append").save())
    assert sorted(_stream(b.port, certs, "t-in")) == sorted(bodies)

    rows = (spark.read.format("streamlet").options(**tls).option("stream", "t-in")
            .option("minPartitions", "2").load().collect())
    assert sorted(bytes(r.value) for r in rows) == sorted(bodies)

    # The export job as the operator runs it: the CA as PEM text in the environment.
    export = job("export_parquet")
    monkeypatch.setenv("STREAMLET_TLS_CA", (certs / "ca.crt").read_text())
    dest = tmp_path / "export"
    cfg = export.parse_args(["--tls", "--port", str(b.port), "--stream", "t-in",
                             "--destination", str(dest)], tmp_path)
    assert export.export(spark, cfg) == 600
    assert sorted(bytes(r.value) for r in spark.read.parquet(str(dest)).collect()) == sorted(bodies)
    assert export.export(spark, cfg) == 0  # the progress was stored, over TLS too


def test_mutual_tls_needs_the_client_certificate(spark: Any,
                                                 broker_factory: Callable[..., BrokerProcess],
                                                 certs: Path, tmp_path: Path) -> None:
    b = _tls_only_broker(broker_factory, tmp_path, certs, verify_peer=True)
    bodies = [body(i) for i in range(300)]
    _stream(b.port, certs, "m-in", bodies, client=True)
    tls = {"port": str(b.port), "tls": "true", "caCert": str(certs / "ca.crt"), "timeout": "10"}
    mtls = {**tls, "clientCert": str(certs / "client.crt"), "clientKey": str(certs / "client.key")}

    rows = spark.read.format("streamlet").options(**mtls).option("stream", "m-in").load().collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(bodies)
    with pytest.raises(Exception, match="(?i)certificate|ssl|reset|closed"):
        spark.read.format("streamlet").options(**tls).option("stream", "m-in").load().collect()


@pytest.mark.parametrize(("options", "message"), [
    ({"caCert": "ca.crt"}, "option caCert: only with tls true"),
    ({"clientCert": "client.crt", "clientKey": "client.key"},
     "options clientCert, clientKey: only with tls true"),
    ({"tls": "true", "clientKey": "client.key"}, "option clientKey: only with clientCert"),
    ({"tls": "yes"}, "option tls must be true or false, not 'yes'"),
    ({"tls": "true", "caCert": "missing.crt"}, "option caCert: cannot read"),
    ({"tls": "true", "caCert": "client.key"}, "options caCert: do not load"),
    ({"tls": "true", "clientCert": "client.crt", "clientKey": "ca.crt"},
     "options clientCert, clientKey: do not load"),
])
def test_bad_tls_options(certs: Path, options: dict[str, str], message: str) -> None:
    named = {k: str(certs / v) if k != "tls" else v for k, v in options.items()}
    with pytest.raises(ValueError, match=message):
        parse_options({"stream": "s", **named})


def test_tls_options(certs: Path) -> None:
    assert parse_options({"stream": "s"}).port == 5552
    opts = parse_options({"stream": "s", "TLS": "True", "caCert": str(certs / "ca.crt")})
    assert (opts.tls, opts.port, opts.ca_cert) == (True, 5551, (certs / "ca.crt").read_text())
    assert opts.ssl_context() is not None and parse_options({"stream": "s"}).ssl_context() is None
    assert "PRIVATE KEY" not in repr(parse_options({
        "stream": "s", "tls": "true", "clientCert": str(certs / "client.crt"),
        "clientKey": str(certs / "client.key")}))
